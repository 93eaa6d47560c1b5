package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process started by the bench (os.Args[0] re-executed with
// -role).
type child struct {
	role string
	cmd  *exec.Cmd
	addr string
}

func startChild(role string, args ...string) (*child, error) {
	cmd := exec.Command(os.Args[0], append([]string{"-role", role}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{role: role, cmd: cmd}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				c.addr = addr
				ready <- nil
				// keep draining so the child never blocks on stdout
				for sc.Scan() {
				}
				return
			}
		}
		ready <- fmt.Errorf("%s child exited before READY", role)
	}()
	select {
	case err = <-ready:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("%s child not ready after 60s", role)
	}
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *child) url() string { return "ws://" + c.addr }

func (c *child) stop() {
	if c == nil || c.cmd.Process == nil {
		return
	}
	// SIGTERM first, so that a child can flush what it must (a profile);
	// killed if it does not exit promptly.
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

// cpu returns the child's utime+stime from /proc/<pid>/stat.
func (c *child) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("bad /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// rssKiB returns VmRSS from /proc/<pid>/status.
func (c *child) rssKiB() (int64, error) { return c.statusKiB("VmRSS:") }

// peakRSSKiB returns VmHWM, the peak RSS since the child started.
func (c *child) peakRSSKiB() (int64, error) { return c.statusKiB("VmHWM:") }

// statusKiB returns a figure in kB of /proc/<pid>/status.
func (c *child) statusKiB(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, c.cmd.Process.Pid)
}

var ctlClient = &http.Client{Timeout: 30 * time.Second}

func ctlGet(ctx context.Context, up *child, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+up.addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := ctlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func upstreamStatsOf(ctx context.Context, up *child) (upstreamStats, error) {
	var st upstreamStats
	err := ctlGet(ctx, up, "/ctl/stats", &st)
	return st, err
}

// env is one measurement's processes: a fresh upstream and, for relay and
// muxd, a fresh proxy in front of it. target is where clients connect.
type env struct {
	mode     string
	upstream *child
	proxy    *child // nil for direct
	target   string
}

// startEnv starts the processes of mode, the upstream with upstreamArgs.
func startEnv(mode string, upstreamArgs ...string) (*env, error) {
	up, err := startChild("upstream", upstreamArgs...)
	if err != nil {
		return nil, err
	}
	e := &env{mode: mode, upstream: up, target: up.url()}
	switch mode {
	case "relay", "muxd":
		p, err := startChild(mode, "-upstream", up.url())
		if err != nil {
			up.stop()
			return nil, err
		}
		e.proxy = p
		e.target = p.url()
	}
	return e, nil
}

func (e *env) stop() {
	e.proxy.stop()
	e.upstream.stop()
}
