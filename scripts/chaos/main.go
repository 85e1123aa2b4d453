// Command chaos runs the chaos scenarios of autodiag against real processes
// on loopback, started through internal/harness as the end-to-end tests
// start them: the autodiag binary (built here), a redis-server per
// scenario, an SQS fake served by this process (so faults can be injected
// into its answers) and, for R3b, toxiproxy-server. Each scenario prints one
// result row; the exit status is 1 when any must-hold fails.
//
// The scenarios are the table in scenarios() below, each a function
// r1 … r10: scenarios.go (R2, R3, R5–R7, R10), lifecycle.go (R1, R4, R8:
// an Auto Scaling fake with a fast clock), toxi.go (R3b).
//
//	scripts/chaos.sh                 # installs toxiproxy, then runs this
//	go run ./scripts/chaos -only R3,R10
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

// row is one scenario's result.
type row struct {
	id, scenario, must, measured string
	pass                         bool
}

type scenario struct {
	id, name, must string
	run            func(l *lab) (measured string, pass bool, err error)
}

func main() {
	os.Exit(run())
}

func run() int {
	only := flag.String("only", "", "comma-separated scenario ids to run (default all)")
	toxi := flag.String("toxiproxy", "", "path of toxiproxy-server (R3b)")
	imds := flag.String("imds-mock", "", "path of ec2-metadata-mock (R1)")
	flag.Parse()

	hl, err := harness.NewLab("chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	defer hl.Stop()
	l := &lab{Lab: hl, toxi: *toxi, imds: *imds}
	start := time.Now()

	want := map[string]bool{}
	for _, id := range strings.Split(*only, ",") {
		if id != "" {
			want[strings.ToUpper(strings.TrimSpace(id))] = true
		}
	}
	fmt.Println("| # | scenario | must hold | measured | result |")
	fmt.Println("|---|---|---|---|---|")
	failed := 0
	for _, s := range scenarios() {
		if len(want) > 0 && !want[strings.ToUpper(s.id)] {
			continue
		}
		t0 := time.Now()
		measured, pass, err := s.run(l)
		if err != nil {
			measured = strings.TrimSpace(measured + " error: " + err.Error())
			pass = false
		}
		r := row{id: s.id, scenario: s.name, must: s.must, measured: fmt.Sprintf("%s (%s)", measured, secs(time.Since(t0))), pass: pass}
		res := "PASS"
		if !r.pass {
			res = "FAIL"
			failed++
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.id, r.scenario, r.must, strings.ReplaceAll(r.measured, "|", "/"), res)
		// Processes of one scenario do not run into the next.
		l.StopProcesses()
	}
	fmt.Fprintf(os.Stderr, "chaos: %d failed, total %s\n", failed, secs(time.Since(start)))
	if failed > 0 {
		return 1
	}
	return 0
}

func scenarios() []scenario {
	return []scenario{
		{"R1", "SIGTERM during a 200-task burst", "0 lost, 0 run twice, 1 completion after the last task", r1},
		{"R2", "kill -9 mid-task, a second agent running", "task re-run exactly once, in-flight record reconciled", r2},
		{"R3", "Redis killed, down 10 s, restarted empty, tasks flowing", "no crash; fail-open counted, fail-closed denied; normal flow within 1 s of Redis returning", r3},
		{"R3b", "300 ms added between agent and Redis (toxiproxy)", "decisions degrade per fail mode within redis.timeout; no task stuck", r3b},
		{"R4", "50 % throttling and 5xx on heartbeat and completion", "action never expires while work remains; one completion", r4},
		{"R5", "fuzz corpus + hostile messages", "0 panics, 0 executions, each rejected with a reason", r5},
		{"R6", "8 agents × 1,000 concurrent decisions, daily 2", "exactly 2 allowed", r6},
		{"R7", "injection in host/params; admin off loopback", "all rejected; admin loopback by default", r7},
		{"R8", "agent restarted mid-drain", "heartbeats resume, completion exactly once", r8},
		{"R10", "SQS answering 5xx on every receive for 20 s", "intake backs off and resumes within one backoff step (≤ 30 s); nothing lost", r10},
	}
}
