package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// This file is a reader of the YAML that deploy/ is written in, for the
// tests that check those files against muxd: block mappings and sequences,
// plain, single- and double-quoted scalars, comments, "---" between
// documents. Nothing else (flow collections, anchors, block scalars,
// multi-line scalars) is read: a file that uses it fails its test, which
// then says what to keep out of it. Scalars stay strings.

// yamlLine is one line that holds something: its indentation and text,
// with comments and trailing spaces cut.
type yamlLine struct {
	n      int // 1-based line number
	indent int
	text   string
}

// parseYAML reads the documents of src.
func parseYAML(src string) ([]any, error) {
	var docs []any
	var lines []yamlLine
	flush := func() error {
		if len(lines) == 0 {
			return nil
		}
		p := &yamlParser{lines: lines}
		v, err := p.node(lines[0].indent)
		if err != nil {
			return err
		}
		if p.i < len(p.lines) {
			return fmt.Errorf("line %d: unexpected indentation", p.lines[p.i].n)
		}
		docs = append(docs, v)
		lines = nil
		return nil
	}
	for i, raw := range strings.Split(src, "\n") {
		if strings.TrimRight(raw, " ") == "---" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if strings.Contains(raw, "\t") {
			return nil, fmt.Errorf("line %d: a tab", i+1)
		}
		text := strings.TrimRight(cutComment(raw), " ")
		if strings.TrimSpace(text) == "" {
			continue
		}
		trimmed := strings.TrimLeft(text, " ")
		lines = append(lines, yamlLine{n: i + 1, indent: len(text) - len(trimmed), text: trimmed})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

// cutComment cuts a comment off line: a # at its start or after a space,
// outside quotes.
func cutComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

// node reads the mapping or sequence whose lines start at indent.
func (p *yamlParser) node(indent int) (any, error) {
	l := p.lines[p.i]
	if l.indent != indent {
		return nil, fmt.Errorf("line %d: indentation %d, want %d", l.n, l.indent, indent)
	}
	if l.text == "-" || strings.HasPrefix(l.text, "- ") {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) sequence(indent int) ([]any, error) {
	var out []any
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.indent < indent {
			break
		}
		if l.indent > indent || !(l.text == "-" || strings.HasPrefix(l.text, "- ")) {
			return nil, fmt.Errorf("line %d: expected a sequence item", l.n)
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		switch {
		case rest == "":
			p.i++
			if p.i >= len(p.lines) || p.lines[p.i].indent <= indent {
				out = append(out, nil)
				continue
			}
			v, err := p.node(p.lines[p.i].indent)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		case isMappingEntry(rest):
			// "- key: value" starts a mapping whose other keys sit
			// under key.
			inner := indent + len(l.text) - len(rest)
			p.lines[p.i] = yamlLine{n: l.n, indent: inner, text: rest}
			v, err := p.mapping(inner)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		default:
			s, err := scalar(rest, l.n)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			p.i++
		}
	}
	return out, nil
}

func (p *yamlParser) mapping(indent int) (map[string]any, error) {
	out := map[string]any{}
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, fmt.Errorf("line %d: unexpected indentation", l.n)
		}
		if !isMappingEntry(l.text) {
			return nil, fmt.Errorf("line %d: expected key: value", l.n)
		}
		key, rest := splitEntry(l.text)
		k, err := scalar(key, l.n)
		if err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: key %q again", l.n, k)
		}
		p.i++
		switch rest {
		case "[]":
			out[k] = []any{}
			continue
		case "{}":
			out[k] = map[string]any{}
			continue
		}
		if rest != "" {
			if out[k], err = scalar(rest, l.n); err != nil {
				return nil, err
			}
			continue
		}
		// A nested node, indented more (a sequence may sit at the key's
		// own indentation, as Kubernetes manifests often write it).
		if p.i < len(p.lines) {
			next := p.lines[p.i]
			if next.indent > indent || next.indent == indent && (next.text == "-" || strings.HasPrefix(next.text, "- ")) {
				if next.indent == indent {
					v, err := p.sequence(indent)
					if err != nil {
						return nil, err
					}
					out[k] = v
					continue
				}
				if out[k], err = p.node(next.indent); err != nil {
					return nil, err
				}
				continue
			}
		}
		out[k] = nil
	}
	return out, nil
}

// isMappingEntry reports whether text is "key:" or "key: value", the key
// plain or quoted.
func isMappingEntry(text string) bool {
	key, _ := splitEntry(text)
	return key != ""
}

// splitEntry splits "key: value" at the colon that ends the key; key is
// "" when text is not an entry.
func splitEntry(text string) (key, rest string) {
	if text == "" || text[0] == '-' && (len(text) == 1 || text[1] == ' ') {
		return "", ""
	}
	end := 0
	if q := text[0]; q == '"' || q == '\'' {
		i := strings.IndexByte(text[1:], q)
		if i < 0 {
			return "", ""
		}
		end = i + 2
		if end >= len(text) || text[end] != ':' {
			return "", ""
		}
	} else {
		i := strings.Index(text, ": ")
		if strings.HasSuffix(text, ":") && (i < 0 || i == len(text)-1) {
			i = len(text) - 1
		}
		if i <= 0 {
			return "", ""
		}
		end = i
	}
	return text[:end], strings.TrimSpace(text[end+1:])
}

// scalar reads a plain or quoted scalar.
func scalar(s string, line int) (string, error) {
	switch {
	case strings.HasPrefix(s, `"`):
		v, err := strconv.Unquote(s)
		if err != nil {
			return "", fmt.Errorf("line %d: %s: %w", line, s, err)
		}
		return v, nil
	case strings.HasPrefix(s, "'"):
		if len(s) < 2 || !strings.HasSuffix(s, "'") {
			return "", fmt.Errorf("line %d: unterminated %s", line, s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case strings.ContainsAny(s[:1], "[{&*!|>%@`"):
		return "", fmt.Errorf("line %d: %q: flow collections, anchors, tags and block scalars are not read here", line, s)
	}
	return s, nil
}

// field returns v[key] for a mapping v (nil otherwise); str the same as a
// string ("" when it is none; key "" is v itself); list as a sequence.
func field(v any, key string) any {
	m, _ := v.(map[string]any)
	return m[key]
}

func str(v any, key string) string {
	if key != "" {
		v = field(v, key)
	}
	s, _ := v.(string)
	return s
}

func list(v any, key string) []any {
	l, _ := field(v, key).([]any)
	return l
}

// TestParseYAML: the reader takes the YAML deploy/ is written in, and
// refuses what it does not read rather than misread it.
func TestParseYAML(t *testing.T) {
	tests := []struct {
		name, src string
		want      string // the documents as JSON; "" when an error is wanted
	}{
		{"mapping, nested, comments", "a: 1 # one\nb:\n  c: \"x # y\"\n  d: 'it''s'\n# all\n", `[{"a":"1","b":{"c":"x # y","d":"it's"}}]`},
		{"sequences: indented and at the key's column", "l:\n  - x\n  - y\nm:\n- k: v\n  j: w\n- z\n", `[{"l":["x","y"],"m":[{"j":"w","k":"v"},"z"]}]`},
		{"nested sequence item", "s:\n  - name: a\n    env:\n      - name: B\n        value: c\n", `[{"s":[{"env":[{"name":"B","value":"c"}],"name":"a"}]}]`},
		{"documents", "a: 1\n---\nb: 2\n", `[{"a":"1"},{"b":"2"}]`},
		{"empty flow collections, colons in values", "a: []\nb: {}\nc: x: y\nd: \"http://h:1/p\"\n", `[{"a":[],"b":{},"c":"x: y","d":"http://h:1/p"}]`},
		{"empty value", "a:\nb: 1\n", `[{"a":null,"b":"1"}]`},
		{"flow sequence refused", "a: [1, 2]\n", ""},
		{"block scalar refused", "a: |\n  x\n", ""},
		{"bad indentation refused", "a:\n    b: 1\n  c: 2\n", ""},
		{"duplicate key refused", "a: 1\na: 2\n", ""},
		{"tab refused", "a:\n\tb: 1\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := parseYAML(tt.src)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("no error; read %v", docs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(docs); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}
