package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/internal/outcome"
)

// testAgent runs an embedded-mode agent from yaml with its admin API on an
// httptest server.
type testAgent struct {
	*Agent
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan error
}

const testConfig = `
workers: 2
diagnostics:
  - name: sleep
    command: [/bin/sleep, "{param.secs}"]
    params: {secs: '[0-9]+(\.[0-9]+)?'}
    timeout: 1m
  - name: echo
    command: [/bin/echo, "{host}", "{id}"]
    timeout: 10s
  - name: fail
    command: [/bin/false]
    timeout: 10s
limiter:
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$']
  rules:
    - name: echo-quota
      match: {diagnostic: [echo]}
      key: host
      limits: [{daily: 2}]
lifecycle:
  drain_timeout: 2m
`

// agentTestHosts are the hosts the tests' tasks name: an agent alone
// answers for them, so that its host-local diagnostics run.
var agentTestHosts = []string{"web-01", "web-01.example.com", "web-1", "web-02.example.com", "web-3", "a.example.com", "h", "a"}

func startAgent(t *testing.T, yaml string) *testAgent {
	t.Helper()
	return startAgentWith(t, yaml, nil)
}

// startAgentWith is startAgent with the options edited by opt (nil: none).
func startAgentWith(t *testing.T, yaml string, opt func(*OpenOptions)) *testAgent {
	t.Helper()
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	o := OpenOptions{Hostname: "test-host",
		// Discovery must not find the id of the machine the tests run on.
		CloudInitPath: filepath.Join(t.TempDir(), "none"), DMIAssetTagPath: filepath.Join(t.TempDir(), "none")}
	if opt != nil {
		opt(&o)
	}
	a, closeFn, err := Open(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{Agent: a, srv: httptest.NewServer(a.Handler()), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	ta.cancel = cancel
	go func() { ta.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ta.done:
			if err != nil {
				t.Logf("Run after cancel: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop")
		}
		ta.srv.Close()
		closeFn()
	})
	// Until Run serves, /readyz says "starting" and intake is not running:
	// a test that looked at once would race Run's start.
	select {
	case <-a.Started():
	case err := <-ta.done:
		ta.done <- err
		t.Fatalf("Run returned before it served: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run not serving after 30s")
	}
	return ta
}

func (ta *testAgent) post(t *testing.T, body string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ta.srv.URL+"/v1/tasks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (ta *testAgent) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ta.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (ta *testAgent) outcome(o string) int64 { return ta.Status().Outcomes[o] }

func TestEmbeddedTaskLifecycle(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	if code, _ := ta.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d before any drain", code)
	}
	code, out := ta.post(t, `{"id":"t-1","host":"Web-01.Example.com.","diagnostic":"echo"}`)
	if code != http.StatusAccepted || out["id"] != "t-1" {
		t.Fatalf("POST valid task = %d %v", code, out)
	}
	waitFor(t, "succeeded", func() bool { return ta.outcome(outcome.Succeeded) == 1 })

	rec, ok, err := ta.d.Store.Task(context.Background(), "t-1")
	if err != nil || !ok {
		t.Fatalf("task record: %v %v", ok, err)
	}
	if rec.Outcome != outcome.Succeeded || rec.Attempts != 1 || strings.TrimSpace(rec.Output) != "web-01.example.com t-1" {
		t.Fatalf("record = %+v", rec)
	}

	for _, tc := range []struct{ body, reason string }{
		{`{"host":"web;reboot.example.com","diagnostic":"echo"}`, "invalid_host"},
		{`{"host":"db.other.org","diagnostic":"echo"}`, "host_not_allowed"},
		{`{"host":"web-01.example.com","diagnostic":"rm-rf"}`, "unknown_diagnostic"},
		{`{"host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"1; reboot"}}`, "invalid_param"},
		{`not json`, "malformed_json"},
	} {
		code, out := ta.post(t, tc.body)
		if code != http.StatusBadRequest || out["reason"] != tc.reason || out["error"] == "" {
			t.Errorf("POST %s = %d %v, want 400 with reason %s", tc.body, code, out, tc.reason)
		}
	}
	if got := ta.outcome(outcome.Rejected); got != 5 {
		t.Fatalf("rejected = %d, want 5", got)
	}
	if got := testutil.ToFloat64(ta.m.outcomes.WithLabelValues("unknown", outcome.Rejected)); got != 2 {
		t.Fatalf("rejected{diagnostic=unknown} = %v: an attacker-chosen diagnostic must not become a label", got)
	}

	// Same id again: ends as duplicate, the diagnostic does not run twice.
	ta.post(t, `{"id":"t-1","host":"web-01.example.com","diagnostic":"echo"}`)
	waitFor(t, "duplicate", func() bool { return ta.outcome(outcome.Duplicate) == 1 })

	// Quota: daily 2 for echo per host; t-1 used one.
	ta.post(t, `{"id":"t-2","host":"web-01.example.com","diagnostic":"echo"}`)
	ta.post(t, `{"id":"t-3","host":"web-01.example.com","diagnostic":"echo"}`)
	waitFor(t, "one more success and one rate limited", func() bool {
		return ta.outcome(outcome.RateLimited) == 1 && ta.outcome(outcome.Succeeded) == 2
	})

	ta.post(t, `{"id":"t-4","host":"web-01.example.com","diagnostic":"fail"}`)
	waitFor(t, "failed", func() bool { return ta.outcome(outcome.Failed) == 1 })

	_, metrics := ta.get(t, "/metrics")
	for _, want := range []string{
		`autodiag_task_outcomes_total{diagnostic="echo",outcome="succeeded"} 2`,
		`autodiag_task_outcomes_total{diagnostic="echo",outcome="rate_limited"} 1`,
		`autodiag_task_outcomes_total{diagnostic="echo",outcome="duplicate"} 1`,
		`autodiag_task_outcomes_total{diagnostic="fail",outcome="failed"} 1`,
		`autodiag_limiter_decisions_total{decision="denied",reason="daily_exceeded",rule="echo-quota"} 1`,
		"autodiag_tasks_received_total 10",
		"autodiag_tasks_inflight 0",
		"autodiag_drain_state 0",
		"autodiag_redis_up 1",
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	audit, err := ta.d.Store.RecentAudit(context.Background(), 100)
	if err != nil || len(audit) != 10 {
		t.Fatalf("audit entries = %d (%v), want one per ended task (10)", len(audit), err)
	}
}

func TestDrainFinishesRunningWork(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	// Runs long enough that a loaded runner holding this test back does not
	// miss the moment two run and one waits, nor the drain they keep going.
	for i := range 3 {
		if code, _ := ta.post(t, fmt.Sprintf(`{"id":"s-%d","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"2"}}`, i)); code != http.StatusAccepted {
			t.Fatalf("POST = %d", code)
		}
	}
	// Two workers: two run, one waits for a slot (received, queued).
	waitFor(t, "two running", func() bool { s := ta.Status(); return s.Inflight == 2 && s.Queued == 1 })
	if !ta.Drain("test", "drain with work") {
		t.Fatal("Drain returned false")
	}
	if code, _ := ta.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while draining, want 503", code)
	}
	if code, _ := ta.post(t, `{"host":"web-01.example.com","diagnostic":"echo"}`); code != http.StatusServiceUnavailable {
		t.Fatalf("POST while draining = %d, want 503", code)
	}
	select {
	case err := <-ta.done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after a drain", err)
		}
		ta.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not end")
	}
	s := ta.Status()
	if s.State != "drained" || s.Outcomes[outcome.Succeeded] != 3 || s.Outcomes[outcome.Released] != 0 {
		t.Fatalf("status after drain = %+v", s)
	}
	if s.Drain == nil || s.Drain.Source != "test" || s.Drain.Remaining != 0 {
		t.Fatalf("drain block = %+v", s.Drain)
	}
}

// TestDrainFinishesTheEmbeddedQueue: tasks POSTed to an embedded agent
// and answered 202 are its work even while they wait in its queue beyond
// the receive window, received by nothing yet: nothing else will ever
// receive them, so a drain runs them too, each to one outcome. Before,
// they stayed in the in-memory queue and ended with the process, with no
// outcome (TestEmbeddedBinarySIGTERM failed so, 1 in many runs).
func TestDrainFinishesTheEmbeddedQueue(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	mem, ok := ta.d.Source.(*queue.Memory)
	if !ok {
		t.Fatalf("source %T, want the embedded queue", ta.d.Source)
	}
	// More than two workers and the receive window (at most workers +
	// base + workers + batch, see worker/window.go) take in at once.
	const n = 12
	for i := range n {
		if code, _ := ta.post(t, fmt.Sprintf(`{"id":"q-%d","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"0.5"}}`, i)); code != http.StatusAccepted {
			t.Fatalf("POST = %d", code)
		}
	}
	waitFor(t, "two running, some still in the queue", func() bool {
		ready, _ := mem.Len()
		return ta.Status().Inflight == 2 && ready > 0
	})
	ta.Drain("test", "drain with tasks still in the embedded queue")
	select {
	case err := <-ta.done:
		ta.done <- err
		if err != nil {
			t.Fatalf("Run = %v, want nil after a drain", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("drain did not end")
	}
	if s := ta.Status(); s.Outcomes[outcome.Succeeded] != n {
		t.Fatalf("outcomes after the drain = %v, want %d succeeded", s.Outcomes, n)
	}
	if ready, inflight := mem.Len(); ready+inflight != 0 {
		t.Fatalf("embedded queue after the drain: %d ready, %d in flight", ready, inflight)
	}
	if _, err := mem.Send(context.Background(), []byte("{}")); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Send after the drain = %v, want ErrClosed", err)
	}
}

func TestFastExitReleases(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	ta.post(t, `{"id":"long-1","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"30"}}`)
	waitFor(t, "running", func() bool { return ta.Status().Inflight == 1 })
	ta.Drain("test", "first signal")
	ta.cancel() // second signal
	select {
	case err := <-ta.done:
		if !errors.Is(err, supervisor.ErrFastExit) {
			t.Fatalf("Run = %v, want ErrFastExit", err)
		}
		ta.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("fast exit did not end the agent")
	}
	if got := ta.outcome(outcome.Released); got != 1 {
		t.Fatalf("released = %d, want 1", got)
	}
	rec, _, _ := ta.d.Store.Task(context.Background(), "long-1")
	if rec.Status == "done" {
		t.Fatalf("a released task was recorded done: %+v", rec)
	}
}

func TestStatusJSONShape(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	_, body := ta.get(t, "/v1/status")
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"state", "instance_id", "inflight", "queued", "outcomes"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/v1/status lacks %q: %s", k, body)
		}
	}
	if m["instance_id"] != "test-host" || m["state"] != "running" {
		t.Fatalf("status = %s", body)
	}
	if up, ok := m["redis_up"]; ok {
		t.Errorf("embedded /v1/status reports redis_up %v without a Redis", up)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ta.srv.URL+"/v1/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/drain = %d", resp.StatusCode)
	}
	waitFor(t, "drained", func() bool { return ta.Status().State == "drained" })
	_, body = ta.get(t, "/v1/status")
	if !bytes.Contains(body, []byte(`"drain"`)) || !bytes.Contains(body, []byte(`"deadline"`)) {
		t.Fatalf("drained status lacks the drain block: %s", body)
	}
}
