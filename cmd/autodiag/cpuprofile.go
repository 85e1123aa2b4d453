package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// envCPUProfile names a file that `autodiag run` writes a CPU profile of
// its whole run to (pprof format), for measuring the agent's own CPU
// under a real workload (scripts/bench-intake PROFILE=dir); unset, no
// profile is taken.
const envCPUProfile = "AUTODIAG_CPU_PROFILE"

// startCPUProfile starts profiling into path and returns what stops it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
