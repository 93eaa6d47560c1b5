package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// What muxd says about its own build: `muxd version`, the startup log line
// and the muxd_build_info metric.
//
// Release builds (scripts/release.sh) stamp all three variables below:
//
//	-ldflags "-X main.version=$(git describe --tags --always --dirty) -X main.buildCommit=… -X main.buildDate=…"
//
// Any other build falls back on what the go command recorded in the binary
// (debug.ReadBuildInfo): the module version (a tag or pseudo-version when
// built from a clone, "(devel)" otherwise) and the VCS stamp (vcs.revision,
// vcs.time, vcs.modified). The go command records no VCS stamp with
// -buildvcs=false, in a linked git worktree (whose .git is a file), or in
// go test binaries; the release script stamps the commit itself for that
// reason.
var (
	// version is the release version, set by -ldflags "-X main.version=…".
	version = ""
	// buildCommit is the full commit hash, with "-dirty" when the tree had
	// uncommitted changes, set by -ldflags "-X main.buildCommit=…".
	buildCommit = ""
	// buildDate is when the binary was built (RFC 3339, UTC), set by
	// -ldflags "-X main.buildDate=…".
	buildDate = ""
)

// buildInfo identifies the running binary. Empty fields are unknown.
type buildInfo struct {
	Version    string // release version, module version, or "(devel)"
	Revision   string // commit hash, "-dirty" appended for a modified tree
	CommitTime string // the commit's time (vcs.time), RFC 3339
	BuildDate  string // when it was built (release builds only)
	GoVersion  string // the Go release that built it, e.g. go1.26.8
	Platform   string // GOOS/GOARCH
}

// ldStamp is what -ldflags -X set: the three variables above.
type ldStamp struct{ version, commit, date string }

// currentBuild is the running binary's buildInfo.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo() // nil when the binary carries none
	return resolveBuild(ldStamp{version, buildCommit, buildDate}, bi)
}

// resolveBuild combines the -ldflags stamp with the go command's build info
// (bi may be nil): a stamped value wins over a recorded one.
func resolveBuild(ld ldStamp, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if b.Revision != "" && modified {
			b.Revision += "-dirty"
		}
	}
	if ld.version != "" {
		b.Version = ld.version
	}
	if ld.commit != "" {
		b.Revision = ld.commit
	}
	b.BuildDate = ld.date
	return b
}

// writeVersion prints `muxd version`: the version on the first line ("muxd
// v1.2.3"), then the commit, its date, the build date and the Go release,
// each where known.
func writeVersion(w io.Writer, b buildInfo) {
	fmt.Fprintln(w, "muxd", b.Version)
	for _, l := range []struct{ name, value string }{
		{"commit", b.Revision}, {"commit date", b.CommitTime}, {"built", b.BuildDate},
		{"go", b.GoVersion + " " + b.Platform},
	} {
		if l.value != "" {
			fmt.Fprintf(w, "  %-12s %s\n", l.name+":", l.value)
		}
	}
}
