package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// firstScreen is how many lines of the README a newcomer sees first.
const firstScreen = 40

// TestReadmeFirstScreen: the README's first screen walks a newcomer from a
// clone to a service: clone, `make dev`, a first call, their own node,
// systemd.
func TestReadmeFirstScreen(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(raw), "\n", firstScreen+1)
	screen := strings.Join(lines[:min(len(lines), firstScreen)], "\n")
	for _, step := range []struct{ name, text string }{
		{"clone", "git clone"},
		{"make dev", "`make dev`"},
		{"first call", `"method":"eth_blockNumber"`},
		{"own node", "--upstream ws://"},
		{"systemd", "[systemd](#systemd)"},
	} {
		if !strings.Contains(screen, step.text) {
			t.Errorf("README.md: the first %d lines have no %s step (%q)", firstScreen, step.name, step.text)
		}
	}
}
