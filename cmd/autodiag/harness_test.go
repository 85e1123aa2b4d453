package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

// The end-to-end tests live in this package, beside the binary they run:
// every test that starts autodiag as a process does it here, through
// internal/harness (the same start-up the chaos lab and the fleet
// simulation use); this file adapts the harness to *testing.T.

// binPath is the autodiag binary the end-to-end tests run as a child
// process, built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "autodiag-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binPath, err = harness.Build(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one `autodiag run` child process of a test: a harness.Agent
// whose failures fail the test.
type proc struct {
	*harness.Agent
	t *testing.T
}

// testHostNames are the hosts the tests' tasks name, which an agent
// alone (embedded state) answers for unless a test says otherwise.
const testHostNames = "web-1,web-01,web-01.example.com,web-2,web-8,web-9"

// startProc runs `autodiag run --config <yaml>` with extra environment
// entries and waits for its "ready" line. The agent and its diagnostics
// are killed when the test ends, if it has not exited; its log's tail is
// logged when the test failed.
func startProc(t *testing.T, yaml string, env ...string) *proc {
	t.Helper()
	if !strings.Contains(yaml, "redis:") && !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "AUTODIAG_HOST_NAMES=") }) {
		// An agent alone runs host-local diagnostics of its own names
		// only: it answers for the hosts the tests' tasks name.
		env = append(env, "AUTODIAG_HOST_NAMES="+testHostNames)
	}
	a, err := harness.SpawnAgent(harness.AgentSpec{Bin: binPath, Dir: t.TempDir(), Config: yaml, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.KillTree()
		if t.Failed() {
			t.Logf("agent stderr (pid %d):\n%s", a.Pid(), harness.LastLines(a.Output(), 60))
		}
	})
	if err := a.AwaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return &proc{Agent: a, t: t}
}

// logsWhere returns the JSON log lines whose fields equal the given
// key/value pairs, e.g. logsWhere("msg", "task deferred", "reason", "running_here").
func (p *proc) logsWhere(kv ...string) []map[string]any { return p.LogsWhere(kv...) }

// awaitLogsWhere is logsWhere once at least one line matches, failing the
// test if none does within 10 s: for a line the agent may write after the
// effect the test observed (an outcome seen through the queue, a metric or
// a sink).
func (p *proc) awaitLogsWhere(kv ...string) []map[string]any {
	p.t.Helper()
	eventually(p.t, 10*time.Second, fmt.Sprintf("a log line with %v", kv), func() bool { return len(p.LogsWhere(kv...)) > 0 })
	return p.LogsWhere(kv...)
}

// logs returns the JSON log lines with msg == msg ("" = all).
func (p *proc) logs(msg string) []map[string]any { return p.Logs(msg) }

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// wait returns the exit code, failing the test after timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	code, exited := p.Wait(timeout)
	if !exited {
		p.t.Fatalf("agent did not exit within %v", timeout)
	}
	return code
}

func (p *proc) url(path string) string { return p.URL(path) }

// httpDo sends one request bound to the test's context; a POST's body is
// JSON.
func httpDo(t testing.TB, method, url, body string) (*http.Response, error) {
	return harness.HTTPDo(t.Context(), nil, method, url, body)
}

func (p *proc) post(path, body string) (int, map[string]any) {
	p.t.Helper()
	code, out, err := p.Post(p.t.Context(), nil, path, body)
	if err != nil {
		p.t.Fatal(err)
	}
	return code, out
}

func (p *proc) getCode(path string) int {
	resp, err := p.get(path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// get is GET path on the agent, bounded by the test's context.
func (p *proc) get(path string) (*http.Response, error) {
	return p.Do(p.t.Context(), nil, http.MethodGet, path, "")
}

// status fetches /v1/status.
func (p *proc) status() map[string]any {
	p.t.Helper()
	out, err := p.Status(p.t.Context())
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

func (p *proc) metrics() string {
	p.t.Helper()
	m, err := p.Metrics(p.t.Context())
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// loadAllowance is what a wait bounded by the code's own constants (a poll
// interval, redis.timeout, a claim idle time) adds for the machine: CI runs
// two test binaries with -race on two cores beside one shared Redis, and
// the agents under test are processes that the scheduler can hold back
// for seconds. A wait ends as soon as its condition holds, so a passing
// test does not spend it.
const loadAllowance = 20 * time.Second

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !harness.Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// runCLI runs the binary with args and returns exit code, stdout, stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr, err := harness.Run(t.Context(), binPath, t.TempDir(), env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return code, stdout, stderr
}
