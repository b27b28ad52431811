package cli

import (
	"context"
	"io"
)

// open is the Opener run uses; tests replace it.
var open Opener = OpenRedis

// run is Run with open.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	return Run(ctx, args, env, stdout, stderr, open)
}
