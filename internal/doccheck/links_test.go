package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// maxReadmeLines bounds the README: what muxd is, how to run and test it,
// how to deploy it, and links; the reference lives in docs/.
const maxReadmeLines = 300

var (
	linkRe    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRe = regexp.MustCompile(`^#{1,6} +(.*)$`)
)

// documents returns the markdown files checked, relative to the root.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "CHANGELOG.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(repoRoot, d)
		out = append(out, rel)
	}
	return out
}

// outsideFences returns the lines of text that are not in a ``` block.
func outsideFences(text string) []string {
	var out []string
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, l)
		}
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 0x7f:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a markdown file.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range outsideFences(text) {
		if m := headingRe.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			for n := 1; out[s]; n++ { // GitHub numbers repeats: x, x-1, x-2
				s = slug(m[1]) + "-" + string(rune('0'+n))
			}
			out[s] = true
		}
	}
	return out
}

func TestDocumentLinksResolve(t *testing.T) {
	for _, doc := range documents(t) {
		t.Run(doc, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(repoRoot, doc))
			if err != nil {
				t.Fatal(err)
			}
			own := anchors(string(raw))
			for _, l := range outsideFences(string(raw)) {
				for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
					target := m[1]
					if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
						continue
					}
					file, frag, _ := strings.Cut(target, "#")
					want := own
					if file != "" {
						path := filepath.Join(repoRoot, filepath.Dir(doc), file)
						text, err := os.ReadFile(path)
						if err != nil {
							if _, serr := os.Stat(path); serr == nil {
								continue // a directory
							}
							t.Errorf("link %q: %v", target, err)
							continue
						}
						if !strings.HasSuffix(file, ".md") {
							continue
						}
						want = anchors(string(text))
					}
					if frag != "" && !want[frag] {
						t.Errorf("link %q: no heading with anchor #%s", target, frag)
					}
				}
			}
		})
	}
}

func TestReadmeIsAFrontDoor(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material to docs/", n, maxReadmeLines)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start":                  "quick-start",
		"Several upstreams (failover)": "several-upstreams-failover",
		"`muxd probe`: a table":        "muxd-probe-a-table",
		"1. The correlation contract (JSON-RPC 2.0 sections 4-6)": "1-the-correlation-contract-json-rpc-20-sections-4-6",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
