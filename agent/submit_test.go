package agent

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// oneWayInConfig: df runs on the machine it describes, and the agent
// answers for web-1 alone: a df task of web-2 can run nowhere (no fleet
// to hand it to), and every way in refuses it.
const oneWayInConfig = `
workers: 1
diagnostics:
  - name: df
    command: [/bin/df]
    runs_on: target
    timeout: 10s
limiter:
  hosts:
    allow: ['^web-[0-9]+$']
routes:
  - name: disk
    match: {source: [generic]}
    tasks: [{diagnostic: df}]
`

// TestOneWayIn: a task refused on its way in is recorded the same
// whichever way it came, POST /v1/tasks or an alert to the alert
// listener (the investigation's tool calls: hooks
// TestInvestigationToolCallSubmits): one audit entry, rejected with the
// same reason, host and diagnostic, counted as received and rejected, and
// nothing put on the queue. Before the one way in, the alert's task went
// onto the queue unchecked and nothing was recorded until a worker took
// it.
func TestOneWayIn(t *testing.T) {
	paths := []struct {
		name string
		post func(t *testing.T, a *Agent) int
	}{
		{"POST /v1/tasks", func(t *testing.T, a *Agent) int {
			return serve(t, a.Handler(), "/v1/tasks", `{"id":"t-1","host":"web-2","diagnostic":"df"}`)
		}},
		{"alert listener", func(t *testing.T, a *Agent) int {
			h, err := a.AlertHandler(nil)
			if err != nil {
				t.Fatal(err)
			}
			return serve(t, h, "/v1/alerts/generic", `{"name":"DiskFull","host":"web-2"}`)
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			cfg, err := config.Load([]byte(oneWayInConfig), nil)
			if err != nil {
				t.Fatal(err)
			}
			src := queue.NewMemory(queue.MemoryOptions{})
			store := state.NewMemory(state.MemoryOptions{})
			lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := New(cfg, Deps{Source: src, Store: store, Limiter: lim, InstanceID: "i-1", HostNames: []string{"web-1"}})
			if err != nil {
				t.Fatal(err)
			}
			code := p.post(t, a)
			if ready, inflight := src.Len(); ready+inflight != 0 {
				t.Errorf("answered %d and queued %d message(s): a refused task must not reach the queue", code, ready+inflight)
			}
			entries, err := store.RecentAudit(t.Context(), 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Fatalf("answered %d; audit %+v, want one entry", code, entries)
			}
			e := entries[0]
			if e.Outcome != outcome.Rejected || e.Reason != worker.ReasonNotThisHost || e.Host != "web-2" || e.Diagnostic != "df" {
				t.Errorf("audit entry %+v, want rejected %s of df on web-2", e, worker.ReasonNotThisHost)
			}
			if n := testutil.ToFloat64(a.m.outcomes.WithLabelValues("df", outcome.Rejected)); n != 1 {
				t.Errorf("autodiag_task_outcomes_total{df,rejected} = %v, want 1", n)
			}
			if n := testutil.ToFloat64(a.m.received); n != 1 {
				t.Errorf("autodiag_tasks_received_total = %v, want 1", n)
			}
			if n := testutil.ToFloat64(a.m.routing.WithLabelValues(worker.ReasonNotThisHost)); n != 1 {
				t.Errorf("autodiag_task_routing_total{not_this_host} = %v, want 1", n)
			}
		})
	}
}

// serve posts body to path on h and returns the status code.
func serve(t *testing.T, h http.Handler, path, body string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestAlertListenerJudgesHostsAsTheAgent: the alert listener routes with
// the agent's own router and validator, built once: an alert naming an IP
// address this agent answers for is accepted and its task queued, as a
// task naming it is. With a second validator of its own (the config's,
// which knows no agent's addresses) the listener refused it
// (ip_literal).
func TestAlertListenerJudgesHostsAsTheAgent(t *testing.T) {
	cfg, err := config.Load([]byte(strings.Replace(oneWayInConfig, `'^web-[0-9]+$'`, `'^[a-z0-9.-]+$'`, 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := queue.NewMemory(queue.MemoryOptions{})
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{Source: src, Store: state.NewMemory(state.MemoryOptions{}), Limiter: lim, InstanceID: "i-1",
		HostNames: []string{"web-1", "10.1.2.3"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.AlertHandler(nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/alerts/generic",
		strings.NewReader(`{"name":"DiskFull","host":"10.1.2.3"}`)))
	if ready, _ := src.Len(); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"accepted":1`) || ready != 1 {
		t.Fatalf("alert on this agent's address = %d %s, %d queued; want accepted and its task queued", rec.Code, rec.Body, ready)
	}
}

// randomID makes the tests' Redis prefixes their own.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
