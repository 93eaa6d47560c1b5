package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseClients(t *testing.T) {
	rows := []struct {
		in      []string
		want    Clients
		wantErr string
	}{
		{in: nil, want: Clients{}},
		{in: []string{"bot-a"}, want: Clients{"bot-a": {}}},
		{in: []string{"bot-a:weight=4, class=bulk ,max_in_flight=10,rate=2.5"}, want: Clients{"bot-a": {Weight: 4, Class: "bulk", MaxInFlight: 10, Rate: 2.5}}},
		{in: []string{"a:weight=2", "b:class=latency"}, want: Clients{"a": {Weight: 2}, "b": {Class: "latency"}}},
		{in: splitClientsEnv("a:weight=2;b:rate=1\nc"), want: Clients{"a": {Weight: 2}, "b": {Rate: 1}, "c": {}}},
		{in: []string{":weight=2"}, wantErr: "no name"},
		{in: []string{"a:weight"}, wantErr: "not key=value"},
		{in: []string{"a:weight=x"}, wantErr: "not a number"},
		{in: []string{"a:colour=red"}, wantErr: "unknown key"},
		{in: []string{"a", "a:weight=2"}, wantErr: "given twice"},
	}
	for _, row := range rows {
		got, err := parseClients(row.in)
		switch {
		case row.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), row.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", row.in, err, row.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", row.in, err)
		case !reflect.DeepEqual(got, row.want):
			t.Errorf("%q: %+v, want %+v", row.in, got, row.want)
		}
	}
}

func TestClientsValidate(t *testing.T) {
	rows := []struct {
		cs   Clients
		want string // "" for none
	}{
		{Clients{"bot-a": {Weight: 2, Class: "bulk"}}, ""},
		{Clients{"default": {}}, "unnamed clients'"},
		{Clients{"a/b": {}}, "not a client name"},
		{Clients{"a": {Weight: -1}}, "must not be negative"},
		{Clients{"a": {Class: "fast"}}, "not latency or bulk"},
	}
	for _, row := range rows {
		var got []string
		row.cs.validate(func(format string, args ...any) { got = append(got, format) })
		switch {
		case row.want == "" && len(got) > 0:
			t.Errorf("%v: %v", row.cs, got)
		case row.want != "" && (len(got) != 1 || !strings.Contains(fmtAll(got), row.want)):
			t.Errorf("%v: problems %v, want one saying %q", row.cs, got, row.want)
		}
	}
}

func fmtAll(s []string) string { return strings.Join(s, "\n") }

// FuzzParseClientEntry: any entry parses or is refused, never panics, and
// what parses and validates is a class muxd knows.
func FuzzParseClientEntry(f *testing.F) {
	for _, s := range []string{"a", "bot-a:weight=4,class=bulk", "a:rate=1e3", ":", "a:=,", "a:weight=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		name, spec, err := parseClientEntry(entry)
		if err != nil {
			return
		}
		if name == "" {
			t.Fatalf("%q parsed with no name", entry)
		}
		bad := false
		Clients{name: spec}.validate(func(string, ...any) { bad = true })
		if bad {
			return
		}
		if spec.Class != "" && spec.Class != "latency" && spec.Class != "bulk" || spec.Weight < 0 || spec.Rate < 0 {
			t.Fatalf("%q validated as %+v", entry, spec)
		}
		if _, ok := (Clients{name: spec}).classes()[name]; !ok {
			t.Fatalf("%q: no class for %q", entry, name)
		}
	})
}
