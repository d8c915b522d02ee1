package main

import (
	"context"
	"io"
)

func watchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return exitError
}
