package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
)

// GET /v1/tasks/{id} in embedded mode: a run task with its output and
// exit code, a denied one with the limiter's summary, 404 for an unknown
// id; GET /v1/status lists the ids.
func TestTaskRecordAPI(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	for _, id := range []string{"e1", "e2", "e3"} {
		if code, out := ta.post(t, `{"id":"`+id+`","host":"a.example.com","diagnostic":"echo","severity":"high",`+
			`"params":{},"alert":{"source":"generic","name":"Disk"}}`); code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %v", id, code, out)
		}
	}
	waitFor(t, "three outcomes", func() bool {
		return ta.outcome(outcome.Succeeded) == 2 && ta.outcome(outcome.RateLimited) == 1
	})

	views := map[string]taskview.Task{}
	for _, id := range []string{"e1", "e2", "e3"} {
		code, body := ta.get(t, "/v1/tasks/"+id)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/tasks/%s: %d %s", id, code, body)
		}
		var v taskview.Task
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"report": null`) {
			t.Errorf("%s: report is not present as null: %s", id, body)
		}
		if v.Severity != "high" || v.Alert == nil || v.Alert.Name != "Disk" || v.ReceivedAt.IsZero() || v.FinishedAt.IsZero() || v.Status != "done" {
			t.Errorf("%s: %s, want severity, alert, received and finished times, status done", id, body)
		}
		views[v.Outcome] = v
	}
	ok := views[outcome.Succeeded]
	if ok.ExitCode == nil || *ok.ExitCode != 0 || !strings.Contains(ok.Output, "a.example.com") || ok.Owner != "test-host" || ok.Attempts != 1 {
		t.Errorf("succeeded task %+v, want exit 0, the echoed host, owner test-host, 1 attempt", ok)
	}
	denied := views[outcome.RateLimited]
	var lim worker.LimiterSummary
	if err := json.Unmarshal(denied.Limiter, &lim); err != nil || lim.Rule != "echo-quota" || lim.Limit != "daily" ||
		lim.Counters.DailyUsed != 2 || lim.Counters.DailyLimit != 2 {
		t.Errorf("denied task limiter %s (%v), want rule echo-quota, limit daily, 2 of 2 used", denied.Limiter, err)
	}
	if denied.ExitCode != nil || denied.Output != "" {
		t.Errorf("denied task has exit code %v output %q; it never ran", denied.ExitCode, denied.Output)
	}

	code, body := ta.get(t, "/v1/tasks/nope")
	var e map[string]string
	_ = json.Unmarshal(body, &e)
	if code != http.StatusNotFound || e["reason"] != "not_found" || e["error"] == "" {
		t.Errorf("GET /v1/tasks/nope: %d %s, want 404 with reason not_found", code, body)
	}
	_, body = ta.get(t, "/v1/status")
	var st admin.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		if !slices.Contains(st.RecentTasks, id) {
			t.Errorf("status recent_tasks %v lacks %s", st.RecentTasks, id)
		}
	}
}

// The results and notify keys report typed problems under their keys,
// with lines.
func TestResultsConfigErrors(t *testing.T) {
	t.Parallel()
	yaml := `results:
  redact:
    - name: mine
      pattern: '('
notify:
  - name: hook
    type: pager
    url: https://example.com/hook
    on: [failed]
notify_max_age: 10s
`
	_, err := config.Load([]byte(yaml), nil)
	want := map[string]int{"results.redact[0].pattern": 4, "notify[0].type": 7, "notify_max_age": 10}
	wantProblemLines(t, err, want)
	cfg, err := config.Load([]byte("results:\n  redact_defaults: true\n  redact:\n    - {name: ticket, pattern: 'TICKET-[0-9]+'}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rules := cfg.Results.Redact.Effective(); len(rules) < 2 || rules[0].Name != "ticket" {
		t.Errorf("effective rules %v, want ticket then the defaults", rules)
	}
}

// A drain whose sink never answers ends within lifecycle.drain_timeout:
// the dispatcher is stopped with what is left of the deadline, not the
// sink's timeout.
func TestDrainNotBlockedBySilentSink(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	var mu sync.Mutex
	var events []string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		events = append(events, r.Header.Get(notify.HeaderEvent))
		mu.Unlock()
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer sink.Close()
	defer close(hang)
	const (
		drainTimeout = 3 * time.Second
		sinkTimeout  = 50 * time.Second
		// What a loaded 2-core runner with -race may add to the drain and
		// Run's return: far below the sink's timeout, which a drain held by
		// the sink would last.
		loadAllowance = 10 * time.Second
	)
	cfg, err := config.Load([]byte(fmt.Sprintf(`
diagnostics:
  - {name: echo, command: [/bin/echo, hi], timeout: 1s}
lifecycle:
  drain_timeout: %s
notify:
  - {name: slow, type: webhook, url: '%s', allow_http: true, timeout: %s, on: [succeeded, drain_started, drain_completed]}
`, drainTimeout, sink.URL, sinkTimeout)), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: "test-host"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	// A task's event reaches the sink (the dispatcher runs) and hangs there.
	ta := &testAgent{Agent: a, srv: srv}
	if code, out := ta.post(t, `{"host":"a","diagnostic":"echo"}`); code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	waitFor(t, "the succeeded event at the sink", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, "succeeded")
	})
	start := time.Now()
	a.Drain("test", "silent sink")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(sinkTimeout):
		t.Fatalf("Run still running %s after the drain began; the silent sink holds it", sinkTimeout)
	}
	if took := time.Since(start); took > drainTimeout+loadAllowance {
		t.Errorf("drain took %s, want within drain_timeout %s", took, drainTimeout)
	}
}

// wantProblemLines checks that err reports each key of want at its line.
func wantProblemLines(t *testing.T, err error, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, ce := range config.Problems(err) {
		got[ce.Key] = ce.Line
	}
	for k, line := range want {
		if got[k] != line {
			t.Errorf("problem %s at line %d, want line %d (all: %v)", k, got[k], line, err)
		}
	}
}
