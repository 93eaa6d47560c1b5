package main

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigurationReferenceListsEveryOption: docs/configuration.md's option
// table has a row for every option of Config, with its environment
// variable, and none for an option that does not exist.
func TestConfigurationReferenceListsEveryOption(t *testing.T) {
	raw, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // option -> its environment cell
	for _, l := range strings.Split(string(raw), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
	}
	typ := reflect.TypeOf(Config{})
	keys := map[string]bool{}
	for i := range typ.NumField() {
		key := typ.Field(i).Tag.Get("toml")
		keys[key] = true
		env, ok := rows[key]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md: no row for option %s", key)
		case env != "MUXD_"+strings.ToUpper(key):
			t.Errorf("docs/configuration.md: option %s: environment %q, want MUXD_%s", key, env, strings.ToUpper(key))
		}
	}
	for key := range rows {
		if !keys[key] {
			t.Errorf("docs/configuration.md: a row for %s, which is no option", key)
		}
	}
}

// update, given to go test (`go generate ./cmd/muxd` does), writes the
// option reference into docs/configuration.md instead of comparing.
var update = flag.Bool("update", false, "write docs/configuration.md's option reference from the option table")

// TestConfigurationReferenceIsCurrent: the option reference committed in
// docs/configuration.md is the one the option table (options.go) makes.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	const path = "../../docs/configuration.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := spliceReference(string(raw), optionReference())
	if !ok {
		t.Fatalf("%s: no %q ... %q markers around the option reference", path, referenceBegin, referenceEnd)
	}
	if want == string(raw) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the option reference is not the one cmd/muxd/options.go makes; run `go generate ./cmd/muxd` and commit the file", path)
}
