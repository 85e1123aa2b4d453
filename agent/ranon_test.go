package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestRecordSaysWhereItRan: every task that ran names the agent that ran
// it (its instance id and the hostname Open learnt) in its record, GET
// /v1/tasks/{id}, its webhook event and its audit entry; a task that
// never ran (rate limited) names none anywhere.
func TestRecordSaysWhereItRan(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	events := map[string]notify.Event{} // by task id
	raw := map[string]string{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev notify.Event
		if json.Unmarshal(b, &ev) == nil && ev.Task != nil {
			mu.Lock()
			events[ev.Task.ID], raw[ev.Task.ID] = ev, string(b)
			mu.Unlock()
		}
	}))
	defer hook.Close()
	cfg, err := config.Load([]byte(fmt.Sprintf(`
instance_id: i-0ranon
host_names: [web-1]
diagnostics:
  - {name: echo, command: [/bin/echo, "{host}"], timeout: 10s}
  - {name: fail, command: [/bin/false], timeout: 10s}
limiter:
  hosts: {allow: ['^[a-z0-9.-]+$']}
  rules:
    - {name: echo-quota, match: {diagnostic: [echo]}, key: host, limits: [{daily: 1}]}
lifecycle: {drain_timeout: 1m}
notify:
  - {name: hook, type: webhook, url: '%s', allow_http: true, timeout: 5s, on: [succeeded, failed, rate_limited]}
`, hook.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: "ranon-host"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	ta := &testAgent{Agent: a, srv: srv}
	defer func() {
		a.Drain("test", "end of test")
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	for _, body := range []string{
		`{"id":"ran-1","host":"web-1","diagnostic":"echo"}`,
		`{"id":"ran-2","host":"web-1","diagnostic":"fail"}`,
	} {
		if code, out := ta.post(t, body); code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %v", body, code, out)
		}
	}
	waitFor(t, "the runs", func() bool { return ta.outcome(outcome.Succeeded) == 1 && ta.outcome(outcome.Failed) == 1 })
	// The quota is spent: this one never runs.
	if code, out := ta.post(t, `{"id":"limited-1","host":"web-1","diagnostic":"echo"}`); code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	waitFor(t, "the denial", func() bool { return ta.outcome(outcome.RateLimited) == 1 })
	waitFor(t, "three webhook events", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) == 3 })

	want := taskview.RanOn{InstanceID: "i-0ranon", Hostname: "ranon-host"}
	for _, id := range []string{"ran-1", "ran-2"} {
		code, body := ta.get(t, "/v1/tasks/"+id)
		var v taskview.Task
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil || v.RanOn == nil || *v.RanOn != want {
			t.Errorf("GET /v1/tasks/%s: %d %s, want ran_on %+v", id, code, body, want)
		}
		mu.Lock()
		ev, evRaw := events[id], raw[id]
		mu.Unlock()
		if ev.Task == nil || ev.Task.RanOn == nil || *ev.Task.RanOn != want {
			t.Errorf("webhook event of %s: %s, want ran_on %+v", id, evRaw, want)
		}
	}
	code, body := ta.get(t, "/v1/tasks/limited-1")
	mu.Lock()
	limitedEvent := raw["limited-1"]
	mu.Unlock()
	if code != http.StatusOK || strings.Contains(string(body), "ran_on") || strings.Contains(limitedEvent, "ran_on") {
		t.Errorf("rate_limited task names a machine: GET %d %s; event %s", code, body, limitedEvent)
	}

	audit, err := a.d.Store.RecentAudit(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	byTask := map[string]string{}
	for _, e := range audit {
		if v, ok := e.Fields[worker.AuditRanOn]; ok {
			byTask[e.TaskID] = v
		}
	}
	if byTask["ran-1"] != "i-0ranon (ranon-host)" || byTask["ran-2"] != "i-0ranon (ranon-host)" || len(byTask) != 2 {
		t.Errorf("audit ran_on fields %v, want i-0ranon (ranon-host) for ran-1 and ran-2 only", byTask)
	}
}
