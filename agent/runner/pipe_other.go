//go:build !linux

package runner

import "os"

// outputPipe returns a run's output pipe.
func outputPipe() (r, w *os.File, err error) { return os.Pipe() }
