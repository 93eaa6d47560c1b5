package main

import (
	"context"
	"fmt"
	"io"
)

// runProbe is filled in by the probe issue.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "muxd probe: not built yet")
	return 2
}
