package core

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file runs the core's rule books: the scripts in testdata/*.txt,
// each a list of events and, under each event, the exact bytes every
// client and the node get from it. A rule change shows as a diff of those
// bytes; `go test ./core/ -run TestScripts -update` rewrites the expected
// lines from what the core does now, for review.
//
// The format (docs/testing.md has it with an example):
//
//	# a comment, kept with the script, step or file it precedes
//	script <name>                        starts a script on a fresh harness
//	config <Field>=<value> ...           changes testConfig (ints, bools,
//	                                     durations, JSON string arrays)
//	[@<duration>] <event> [<frame>]      one step (the events of harness.step);
//	                                     @ moves the clock to t0+duration first
//	  <effect>                           an expected effect line, as render
//	                                     writes it, two spaces in
//	  count <name> = <n>                 an observer count after the step
//	  key <key> <state> <members>        the subscription keys after the
//	  keys none                          step (all of them, sorted), or none
//
// A frame or effect is written as is, but for two spellings: ${c*n} stands
// for the byte c n times (for large frames), and a frame with a leading or
// trailing space is written between backquotes.

var update = flag.Bool("update", false, "rewrite the expected effects in core/testdata/*.txt from what the core does")

// scriptFile is one testdata file.
type scriptFile struct {
	head    []string // the comment lines at its top
	scripts []*script
	tail    []string // comment lines after its last step
}

// script is one script of a file: a row of a table of scripts.
type script struct {
	comments []string
	name     string
	config   []string // Field=value, as written
	steps    []scriptStep
	line     int
}

// scriptStep is a step with where it was written and its comments.
type scriptStep struct {
	step
	comments []string
	keysSet  bool
	countsOf []string // the counts' names, in the order written
	line     int
}

// runLength is the shortest run of one byte that format writes as ${c*n}.
const runLength = 100

// expand replaces each ${c*n} in s by c n times.
func expand(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 || end < 5 || s[i+3] != '*' {
			return "", fmt.Errorf("bad run %q", s[i:])
		}
		n, err := strconv.Atoi(s[i+4 : i+end])
		if err != nil || n <= 0 {
			return "", fmt.Errorf("bad run %q", s[i:i+end+1])
		}
		b.WriteString(strings.Repeat(s[i+2:i+3], n))
		s = s[i+end+1:]
	}
}

// compress writes each run of one byte at least runLength long as ${c*n}.
func compress(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i >= runLength && s[i] >= 0x21 && s[i] < 0x7f {
			fmt.Fprintf(&b, "${%c*%d}", s[i], j-i)
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// frameText writes a frame for a step line.
func frameText(s string) (string, error) {
	c := compress(s)
	if c != strings.TrimSpace(c) || strings.HasPrefix(c, "`") {
		if strings.ContainsAny(c, "`\n\r") {
			return "", fmt.Errorf("frame %q cannot be written", s)
		}
		c = "`" + c + "`"
	}
	for _, r := range c {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("frame %q has a control character", s)
		}
	}
	return c, nil
}

// parseFrame reads a frame written by frameText.
func parseFrame(s string) (string, error) {
	if strings.HasPrefix(s, "`") {
		if len(s) < 2 || !strings.HasSuffix(s, "`") {
			return "", fmt.Errorf("unclosed backquote in %q", s)
		}
		s = s[1 : len(s)-1]
	}
	return expand(s)
}

// takesFrame reports whether an event is followed by a frame.
func takesFrame(verb string) bool {
	if verb == "up" || verb == "uphead" {
		return true
	}
	if len(verb) > 1 && verb[0] == 'c' {
		_, err := strconv.Atoi(verb[1:])
		return err == nil
	}
	return false
}

// parseStepLine reads "[@at] event [frame]".
func parseStepLine(l string) (step, error) {
	var s step
	if strings.HasPrefix(l, "@") {
		at, rest, _ := strings.Cut(l[1:], " ")
		d, err := time.ParseDuration(at)
		if err != nil || d == 0 {
			return s, fmt.Errorf("bad time %q", at)
		}
		s.at, l = d, rest
	}
	verb, rest, _ := strings.Cut(l, " ")
	if !takesFrame(verb) {
		s.do = l
		return s, nil
	}
	s.do = verb
	if verb == "up" {
		// "up <gen> <frame>": a frame never starts with a bare number
		// and a space.
		if gen, more, ok := strings.Cut(rest, " "); ok {
			if _, err := strconv.Atoi(gen); err == nil {
				s.do, rest = "up "+gen, more
			}
		}
	}
	in, err := parseFrame(rest)
	s.in = in
	return s, err
}

// stepLine writes a step's event line.
func stepLine(s step) (string, error) {
	var b strings.Builder
	if s.at != 0 {
		b.WriteString("@" + s.at.String() + " ")
	}
	b.WriteString(s.do)
	verb, _, _ := strings.Cut(s.do, " ")
	if takesFrame(verb) {
		f, err := frameText(s.in)
		if err != nil {
			return "", err
		}
		if f != "" {
			b.WriteString(" " + f)
		}
	} else if s.in != "" {
		return "", fmt.Errorf("event %q takes no frame", s.do)
	}
	return b.String(), nil
}

// parseScriptFile reads a testdata file.
func parseScriptFile(data []byte) (*scriptFile, error) {
	f := &scriptFile{}
	var (
		cur     *script
		st      *scriptStep
		pending []string
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		errf := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", n, fmt.Sprintf(format, a...))
		}
		switch {
		case l == "":
			if cur == nil && len(pending) > 0 {
				if len(f.head) > 0 {
					f.head = append(f.head, "")
				}
				f.head, pending = append(f.head, pending...), nil
			}
		case strings.HasPrefix(l, "#"):
			pending = append(pending, l)
		case strings.HasPrefix(l, "script "):
			cur = &script{name: strings.TrimPrefix(l, "script "), comments: pending, line: n}
			pending, st = nil, nil
			f.scripts = append(f.scripts, cur)
		case cur == nil:
			return nil, errf("%q before the first script", l)
		case strings.HasPrefix(l, "config "):
			if len(cur.steps) > 0 {
				return nil, errf("config after a step")
			}
			cur.config = append(cur.config, strings.Fields(strings.TrimPrefix(l, "config "))...)
		case strings.HasPrefix(l, "  "):
			if st == nil {
				return nil, errf("expectation %q before a step", l)
			}
			if len(pending) > 0 {
				return nil, errf("comment inside a step's expectations")
			}
			l = l[2:]
			switch {
			case strings.HasPrefix(l, "count "):
				name, v, ok := strings.Cut(strings.TrimPrefix(l, "count "), " = ")
				c, err := strconv.Atoi(v)
				if !ok || err != nil {
					return nil, errf("bad count %q", l)
				}
				if st.counts == nil {
					st.counts = map[string]int{}
				}
				st.counts[name] = c
				st.countsOf = append(st.countsOf, name)
			case l == "keys none":
				st.keys, st.keysSet = []string{}, true
			case strings.HasPrefix(l, "key "):
				st.keys, st.keysSet = append(st.keys, strings.TrimPrefix(l, "key ")), true
			default:
				w, err := expand(l)
				if err != nil {
					return nil, errf("%v", err)
				}
				st.want = append(st.want, w)
			}
		default:
			s, err := parseStepLine(l)
			if err != nil {
				return nil, errf("%v", err)
			}
			cur.steps = append(cur.steps, scriptStep{step: s, comments: pending, line: n})
			pending = nil
			st = &cur.steps[len(cur.steps)-1]
		}
	}
	f.tail = pending
	return f, sc.Err()
}

// format writes f back as text.
func (f *scriptFile) format() ([]byte, error) {
	var b bytes.Buffer
	line := func(s string) { b.WriteString(s + "\n") }
	for _, c := range f.head {
		line(c)
	}
	for i, s := range f.scripts {
		if i > 0 || len(f.head) > 0 {
			line("")
		}
		for _, c := range s.comments {
			line(c)
		}
		line("script " + s.name)
		if len(s.config) > 0 {
			line("config " + strings.Join(s.config, " "))
		}
		for _, st := range s.steps {
			for _, c := range st.comments {
				line(c)
			}
			l, err := stepLine(st.step)
			if err != nil {
				return nil, fmt.Errorf("script %s: %w", s.name, err)
			}
			line(l)
			for _, w := range st.want {
				line("  " + compress(w))
			}
			for _, name := range st.countsOf {
				line(fmt.Sprintf("  count %s = %d", name, st.counts[name]))
			}
			if st.keysSet {
				if len(st.keys) == 0 {
					line("  keys none")
				}
				for _, k := range st.keys {
					line("  key " + k)
				}
			}
		}
	}
	if len(f.tail) > 0 {
		line("")
		for _, c := range f.tail {
			line(c)
		}
	}
	return b.Bytes(), nil
}

// configMod returns the change a script's config lines make to testConfig.
func configMod(fields []string) (func(*Config), error) {
	type set struct {
		i int
		v reflect.Value
	}
	var sets []set
	ct := reflect.TypeOf(Config{})
	for _, kv := range fields {
		k, v, ok := strings.Cut(kv, "=")
		sf, found := ct.FieldByName(k)
		if !ok || !found {
			return nil, fmt.Errorf("config %q: no such field", kv)
		}
		val := reflect.New(sf.Type).Elem()
		switch {
		case sf.Type == reflect.TypeOf(time.Duration(0)):
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", kv, err)
			}
			val.SetInt(int64(d))
		case sf.Type.Kind() == reflect.Int:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", kv, err)
			}
			val.SetInt(int64(n))
		case sf.Type.Kind() == reflect.Bool:
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", kv, err)
			}
			val.SetBool(bv)
		case sf.Type == reflect.TypeOf([]string(nil)):
			var ss []string
			if err := json.Unmarshal([]byte(v), &ss); err != nil {
				return nil, fmt.Errorf("config %q: %w", kv, err)
			}
			val.Set(reflect.ValueOf(ss))
		default:
			return nil, fmt.Errorf("config %q: a field of type %s cannot be set", kv, sf.Type)
		}
		sets = append(sets, set{sf.Index[0], val})
	}
	return func(c *Config) {
		cv := reflect.ValueOf(c).Elem()
		for _, s := range sets {
			cv.Field(s.i).Set(s.v)
		}
	}, nil
}

// TestScripts plays every script in testdata/*.txt on a fresh harness,
// checking each step's effects, counts and keys as written and the
// harness's invariants on every step and at the end; then plays it again
// without an Observer, as counting must not change what the core does.
// With -update it rewrites each file's expectations from what it got.
func TestScripts(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parseScriptFile(data)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// The file must read back as written: what -update writes is
			// what a reviewer reads.
			if out, err := f.format(); err != nil {
				t.Fatalf("%s: %v", path, err)
			} else if !*update && !bytes.Equal(out, data) {
				t.Errorf("%s is not in the form -update writes; run go test ./core/ -run TestScripts -update", path)
			}
			seen := map[string]bool{}
			for _, s := range f.scripts {
				if seen[s.name] {
					t.Errorf("%s:%d: script %s twice", path, s.line, s.name)
				}
				seen[s.name] = true
				t.Run(s.name, func(t *testing.T) { playScript(t, path, s) })
			}
			if *update {
				out, err := f.format()
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// playScript plays s twice (with and without an Observer) and, under
// -update, writes what it got into s.
func playScript(t *testing.T, path string, s *script) {
	mod, err := configMod(s.config)
	if err != nil {
		t.Fatalf("%s:%d: %v", path, s.line, err)
	}
	steps := make([]step, len(s.steps))
	for i, st := range s.steps {
		steps[i] = st.step
		if st.keysSet && steps[i].keys == nil {
			steps[i].keys = []string{}
		}
	}
	h := newHarness(t, mod)
	h.where = func(i int) string { return fmt.Sprintf("%s:%d", path, s.steps[i].line) }
	if *update {
		h.got = make([]stepGot, len(steps))
	}
	h.run(steps)
	h.checkGauges()
	if *update {
		for i := range s.steps {
			st := &s.steps[i]
			st.want = h.got[i].effects
			if st.keysSet {
				st.keys = h.got[i].keys
			}
			for _, name := range st.countsOf {
				st.counts[name] = h.got[i].counts[name]
			}
		}
		return
	}
	// Counting must not change what the core does: the same script
	// without an Observer has the same effects.
	h = newHarness(t, func(c *Config) {
		mod(c)
		c.Observer = nil
	})
	h.where = func(i int) string { return fmt.Sprintf("%s:%d (no Observer)", path, s.steps[i].line) }
	h.run(withoutCounts(steps))
}

// stepGot is what a step did, kept under -update.
type stepGot struct {
	effects []string
	keys    []string
	counts  map[string]int
}

// TestScriptFileErrors: a testdata file the walker cannot read exactly is
// refused with its line, never played as something else.
func TestScriptFileErrors(t *testing.T) {
	for _, tt := range []struct{ name, text string }{
		{"a step before any script", "join\n"},
		{"an expectation before any step", "script s\n  idle\n"},
		{"a count that is no number", "script s\njoin\n  count retried = x\n"},
		{"a count without its value", "script s\njoin\n  count retried\n"},
		{"a time that is no duration", "script s\n@soon tick\n"},
		{"a zero time", "script s\n@0s tick\n"},
		{"a run without its length", "script s\nc1 ${a*}\n"},
		{"a run not closed", "script s\nc1 ${a*10\n"},
		{"an unclosed backquote", "script s\nc1 ` [ ]\n"},
		{"config after a step", "script s\njoin\nconfig MaxBatch=1\n"},
		{"a comment among expectations", "script s\njoin\n  idle\n# why\n  idle\n"},
	} {
		if _, err := parseScriptFile([]byte(tt.text)); err == nil {
			t.Errorf("%s: read without an error", tt.name)
		}
	}
	for _, fields := range [][]string{{"NoSuchField=1"}, {"MaxBatch"}, {"MaxBatch=x"}, {"UpstreamWait=5"}, {"GapNotices=maybe"}, {`DenyMethods=["x"`}, {"Observer=nil"}} {
		if _, err := configMod(fields); err == nil {
			t.Errorf("config %q: accepted", fields)
		}
	}
	// What format cannot write back as read is refused too.
	for _, s := range []step{{do: "c1", in: "a\nb"}, {do: "c1", in: " `x` "}, {do: "tick", in: "x"}} {
		if l, err := stepLine(s); err == nil {
			t.Errorf("step %q %q written as %q", s.do, s.in, l)
		}
	}
}
