package main

import (
	"bufio"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

// unitFile is a systemd unit file: section -> key -> values in order.
type unitFile map[string]map[string][]string

func readUnit(t *testing.T, name string) unitFile {
	t.Helper()
	f, err := os.Open("../../configs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: not a unit file line: %q", name, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// TestSystemdUnits checks the properties of configs/*.service and *.socket
// that running under systemd depends on (systemd-analyze verify, run by
// scripts/verify-units.sh in CI where it is installed, checks the syntax):
//   - a configuration error (exit 2) is not restarted in a loop;
//   - the service does not pull in its socket units, so that without them
//     muxd binds what its config says (listen, ipc);
//   - the IPC socket lives outside the service's RuntimeDirectory, which
//     systemd deletes whenever the service stops or restarts, and the
//     sockets are not stopped with the service (no PartOf);
//   - the sockets' names are those serve looks for ("ws", "ipc");
//   - systemctl reload sends SIGHUP (a reload).
func TestSystemdUnits(t *testing.T) {
	svc := readUnit(t, "muxd.service")
	if got := svc.get("Service", "Type"); got != "notify" {
		t.Errorf("muxd.service: Type=%s, want notify (muxd sends READY=1)", got)
	}
	if got := svc.get("Service", "Restart"); got != "on-failure" {
		t.Errorf("muxd.service: Restart=%s, want on-failure", got)
	}
	if !slices.Contains(strings.Fields(svc.get("Service", "RestartPreventExitStatus")), "2") {
		t.Error("muxd.service: no RestartPreventExitStatus=2: a config error (exit 2) restarts in a loop")
	}
	if got := svc.get("Service", "ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Errorf("muxd.service: ExecReload=%s, want /bin/kill -HUP $MAINPID (systemctl reload: muxd reloads on SIGHUP)", got)
	}
	if !strings.Contains(svc.get("Service", "ExecStart"), "--config /etc/muxd/muxd.toml") {
		t.Errorf("muxd.service: ExecStart=%s does not read /etc/muxd/muxd.toml", svc.get("Service", "ExecStart"))
	}
	for _, dep := range []struct{ section, key string }{
		{"Unit", "Wants"}, {"Unit", "Requires"}, {"Unit", "BindsTo"}, {"Unit", "After"}, {"Service", "Sockets"},
	} {
		for _, v := range svc[dep.section][dep.key] {
			if strings.Contains(v, ".socket") {
				t.Errorf("muxd.service: %s=%s pulls in the socket units: without them enabled, listen and ipc in the config must apply", dep.key, v)
			}
		}
	}
	runtimeDir := svc.get("Service", "RuntimeDirectory")
	if runtimeDir == "" {
		t.Error("muxd.service: no RuntimeDirectory (muxd needs a writable /run/muxd for ipc under ProtectSystem=strict)")
	}

	for _, s := range []struct{ file, fdName string }{{"muxd.socket", "ws"}, {"muxd-ipc.socket", "ipc"}} {
		u := readUnit(t, s.file)
		if got := u.get("Socket", "FileDescriptorName"); got != s.fdName {
			t.Errorf("%s: FileDescriptorName=%s, want %s (the name serve looks for)", s.file, got, s.fdName)
		}
		if got := u.get("Socket", "Service"); got != "muxd.service" {
			t.Errorf("%s: Service=%s, want muxd.service", s.file, got)
		}
		if v := u["Unit"]["PartOf"]; len(v) > 0 {
			t.Errorf("%s: PartOf=%v stops the socket with the service: clients cannot connect while muxd restarts", s.file, v)
		}
		if got := u.get("Install", "WantedBy"); got != "sockets.target" {
			t.Errorf("%s: WantedBy=%s, want sockets.target", s.file, got)
		}
	}
	ws := readUnit(t, "muxd.socket")
	if got, want := ws.get("Socket", "ListenStream"), defaults().Listen; got != want {
		t.Errorf("muxd.socket: ListenStream=%s, want muxd's default listen %s", got, want)
	}
	ipc := readUnit(t, "muxd-ipc.socket")
	p := ipc.get("Socket", "ListenStream")
	if !path.IsAbs(p) {
		t.Fatalf("muxd-ipc.socket: ListenStream=%s is not a path", p)
	}
	if runtimeDir != "" && strings.HasPrefix(p, path.Join("/run", runtimeDir)+"/") {
		t.Errorf("muxd-ipc.socket: %s is inside the service's RuntimeDirectory /run/%s, which systemd deletes when muxd stops or restarts", p, runtimeDir)
	}
	if m := ipc.get("Socket", "SocketMode"); m != "0600" && m != "0660" {
		t.Errorf("muxd-ipc.socket: SocketMode=%s, want 0600 (or 0660 with a SocketGroup)", m)
	}
}

// TestSystemdTemplateUnit: configs/muxd@.service runs one muxd per chain,
// reading /etc/muxd/%i.toml and /etc/muxd/%i.env, each instance with its
// own runtime directory; every other [Service] setting, the hardening
// included, is muxd.service's, so that a setting added to one and not the
// other fails here.
func TestSystemdTemplateUnit(t *testing.T) {
	svc := readUnit(t, "muxd.service")
	tpl := readUnit(t, "muxd@.service")
	instance := map[string]string{ // the settings an instance has of its own
		"ExecStart":        "/usr/local/bin/muxd --config /etc/muxd/%i.toml",
		"EnvironmentFile":  "-/etc/muxd/%i.env",
		"RuntimeDirectory": "muxd-%i",
	}
	for key, want := range instance {
		if got := tpl["Service"][key]; len(got) != 1 || got[0] != want {
			t.Errorf("muxd@.service: %s=%v, want %s", key, got, want)
		}
	}
	for key, want := range svc["Service"] {
		if _, own := instance[key]; own {
			continue
		}
		if got := tpl["Service"][key]; !slices.Equal(got, want) {
			t.Errorf("muxd@.service: %s=%v, muxd.service has %v", key, got, want)
		}
	}
	for key, got := range tpl["Service"] {
		if _, ok := svc["Service"][key]; !ok {
			t.Errorf("muxd@.service: %s=%v, which muxd.service does not set", key, got)
		}
	}
	if d := tpl.get("Unit", "Description"); !strings.Contains(d, "%i") {
		t.Errorf("muxd@.service: Description=%s does not name the instance", d)
	}
	for _, key := range []string{"After", "Wants", "Documentation"} {
		if got, want := tpl["Unit"][key], svc["Unit"][key]; !slices.Equal(got, want) {
			t.Errorf("muxd@.service: %s=%v, muxd.service has %v", key, got, want)
		}
	}
	for _, dep := range []string{"Wants", "Requires", "BindsTo", "After"} {
		for _, v := range tpl["Unit"][dep] {
			if strings.Contains(v, ".socket") {
				t.Errorf("muxd@.service: %s=%s: instances have no socket units", dep, v)
			}
		}
	}
	if got := tpl.get("Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("muxd@.service: WantedBy=%s, want multi-user.target", got)
	}
}
