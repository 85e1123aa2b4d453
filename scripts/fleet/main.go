// Command fleet is the fleet simulation that scripts/fleetsim runs: N real
// `autodiag run` agents (default 200) on one task queue, one lifecycle
// queue, one Auto Scaling group and one redis-server, living through a
// freeze, a scale-in through lifecycle hooks and abrupt kills while a
// steady, long-tailed workload flows. It prints the result tables, writes
// fleetsim.json and the SVGs beside it, and exits 1 when any must-hold
// fails, 2 when the lab could not be set up. The processes and fakes are
// the ones the end-to-end tests and the chaos lab start
// (internal/harness).
//
//	scripts/fleetsim -agents 20 -duration 2m   # the quick check
//	go run ./scripts/fleet -h                  # every flag (FLEETSIM_* variables)
//
// The files: fleet.go the options, the start and the timeline; fleet_check.go
// what must hold and the report; fleet_plot.go the SVGs; fleet_redis.go the
// Redis table (INFO per command: bare, idle, run; a MONITOR window naming
// scripts and keys; -redis-cluster); fleet_notice.go the lifecycle queue's
// receives per notice.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	o, err := parseFleetOpts(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	l, err := harness.NewLab("fleet")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	defer l.Stop()
	r, err := runFleetLab(l, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		if r != nil {
			// Before Stop removes the lab: its agents' logs say what went wrong.
			f := failure{Date: time.Now().UTC().Format(time.RFC3339), Params: r.params(), Error: err.Error(),
				Health: r.health.all(), Warnings: agentWarnings(l.Dir)}
			if werr := writeFailure(o.out, f, os.Stdout); werr != nil {
				fmt.Fprintln(os.Stderr, "fleet:", werr)
			}
		}
		return 2
	}
	res := r.check()
	res.Warnings = agentWarnings(l.Dir) // before Stop removes the lab
	if err := res.write(o.out); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	res.print(os.Stdout)
	printWarnings(os.Stdout, res.Warnings)
	if !res.Pass {
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fleet: %s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }
