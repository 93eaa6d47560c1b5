package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/mux"
)

// Clients is the clients option: named clients' shares and limits, by the
// name a client gives in its URL's path (ws://127.0.0.1:8547/bot-a) or the
// X-Muxd-Client header (mux.ClientName). In the file, one table per name:
//
//	[clients.bot-a]
//	weight = 4
//	class = "latency"
//
// As a flag (repeatable) or in MUXD_CLIENTS (entries separated by ';' or
// newlines), one entry per name: "bot-a:weight=4,class=bulk,rate=50".
type Clients map[string]ClientSpec

// ClientSpec is one name's share and limits (core.ClientClass).
type ClientSpec struct {
	Weight      int     `toml:"weight"`        // its share of calls at the node past max_upstream_in_flight (1)
	MaxInFlight int     `toml:"max_in_flight"` // requests in flight for all its sessions (0: none beyond max_in_flight)
	Class       string  `toml:"class"`         // latency (default) or bulk
	Rate        float64 `toml:"rate"`          // requests per second (0: none)
}

// parseClientEntry reads one "name:key=value,…" entry.
func parseClientEntry(entry string) (string, ClientSpec, error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(entry), ":")
	name = strings.TrimSpace(name)
	var spec ClientSpec
	if name == "" {
		return "", spec, fmt.Errorf("an entry has no name (want name:weight=2,class=bulk,…)")
	}
	for _, kv := range strings.Split(rest, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return "", spec, fmt.Errorf("client %s: %s is not key=value", shownValue(name), shownValue(kv))
		}
		var err error
		switch k {
		case "weight":
			spec.Weight, err = strconv.Atoi(v)
		case "max_in_flight":
			spec.MaxInFlight, err = strconv.Atoi(v)
		case "rate":
			spec.Rate, err = strconv.ParseFloat(v, 64)
		case "class":
			spec.Class = v
		default:
			return "", spec, fmt.Errorf("client %s: unknown key %s (weight, max_in_flight, class, rate)", shownValue(name), shownValue(k))
		}
		if err != nil {
			return "", spec, fmt.Errorf("client %s: %s: %s is not a number", shownValue(name), k, shownValue(v))
		}
	}
	return name, spec, nil
}

// parseClients reads entries (flags, or MUXD_CLIENTS split) into Clients;
// a name given twice is an error.
func parseClients(entries []string) (Clients, error) {
	out := Clients{}
	for _, e := range entries {
		if strings.TrimSpace(e) == "" {
			continue
		}
		name, spec, err := parseClientEntry(e)
		if err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("client %s given twice", shownValue(name))
		}
		out[name] = spec
	}
	return out, nil
}

// splitClientsEnv splits MUXD_CLIENTS into entries.
func splitClientsEnv(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == '\n' })
}

// validate reports every problem of the clients option through add.
func (cs Clients) validate(add func(format string, args ...any)) {
	for _, name := range cs.names() {
		s := cs[name]
		switch {
		case name == "default":
			add("clients: the name default is the unnamed clients' (pick another)")
		case mux.ValidClientName(name) != name:
			add("clients: %s is not a client name (1 to 64 of A-Z a-z 0-9 . _ -)", shownValue(name))
		}
		if s.Weight < 0 || s.MaxInFlight < 0 || s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) {
			add("clients.%s: weight, max_in_flight and rate must not be negative", name)
		}
		if s.Class != "" && s.Class != "latency" && s.Class != "bulk" {
			add("clients.%s: class %s is not latency or bulk", name, shownValue(s.Class))
		}
	}
}

func (cs Clients) names() []string {
	out := make([]string, 0, len(cs))
	for n := range cs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// classes returns cs as mux takes it (nil: none).
func (cs Clients) classes() map[string]core.ClientClass {
	if len(cs) == 0 {
		return nil
	}
	out := make(map[string]core.ClientClass, len(cs))
	for name, s := range cs {
		out[name] = core.ClientClass{Weight: max(s.Weight, 1), MaxInFlight: s.MaxInFlight, Rate: s.Rate, Bulk: s.Class == "bulk"}
	}
	return out
}
