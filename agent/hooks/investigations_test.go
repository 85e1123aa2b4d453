package hooks

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestInvestigationToolCallSubmits: an investigation's tool call goes in
// through the one way in (worker.Submitter), as POST /v1/tasks and the
// alert listener do (agent TestOneWayIn): a call the agent refuses is
// answered rejected at once and audited exactly as the same task
// submitted directly is, and nothing is queued; a valid call is queued
// signed with the fleet's origin key and stamped.
func TestInvestigationToolCallSubmits(t *testing.T) {
	cfg, err := config.Load([]byte(`
diagnostics:
  - {name: df, command: [/bin/df], runs_on: target, timeout: 10s, investigate: true}
limiter: {hosts: {allow: ['^web-[0-9]+$']}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, catalog, err := cfg.CompileCatalog()
	if err != nil {
		t.Fatal(err)
	}
	v.OriginKey = []byte("fleet key")
	clk := clock.NewManual(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	src := queue.NewMemory(queue.MemoryOptions{})
	store := state.NewMemory(state.MemoryOptions{})
	red, err := redact.New(cfg.Results.Redact.Effective(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sub := worker.NewSubmitter(worker.Options{Source: src, Store: store, Validator: v, Catalog: catalog, Clock: clk,
		Redactor: red, Logger: slog.New(slog.DiscardHandler), InstanceID: "i-1", Placement: worker.Placement{Names: []string{"web-1"}},
		Metrics: worker.Metrics{Received: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}),
			Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "o"}, []string{"diagnostic", "outcome"}),
			Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d"}, []string{"diagnostic"}),
			Inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "i"})}})
	at := &agentTasks{o: Options{Config: cfg, Store: store, Tasks: sub, Validator: v, Clock: clk}, poll: time.Millisecond}

	rec, err := at.Submit(t.Context(), investigate.TaskSpec{ID: "inv-1-s1", Host: "web-2", Diagnostic: "df",
		Origin: task.OriginInvestigation, Parent: "t-0", Investigation: "inv-1", Step: 1})
	if err != nil || rec.Outcome != outcome.Rejected || rec.ID != "inv-1-s1" {
		t.Fatalf("tool call of df on web-2 = %+v, %v; want rejected at once", rec, err)
	}
	if ready, inflight := src.Len(); ready+inflight != 0 {
		t.Fatalf("%d message(s) queued for a refused tool call", ready+inflight)
	}
	if _, err := sub.Submit(t.Context(), task.Task{ID: "inv-1-s1", Host: "web-2", Diagnostic: "df"}); task.Reason(err) != worker.ReasonNotThisHost {
		t.Fatalf("direct Submit: %v, want %s", err, worker.ReasonNotThisHost)
	}
	entries, err := store.RecentAudit(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("audit %+v, want the tool call's entry and the direct one", entries)
	}
	if !reflect.DeepEqual(entries[0], entries[1]) || entries[0].Outcome != outcome.Rejected || entries[0].Reason != worker.ReasonNotThisHost {
		t.Fatalf("tool call audited %+v, direct Submit %+v: want the same rejected %s entry", entries[1], entries[0], worker.ReasonNotThisHost)
	}

	// A valid call is queued, signed; the test reads no record back.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := at.Submit(ctx, investigate.TaskSpec{ID: "inv-1-s2", Host: "web-1", Diagnostic: "df",
		Origin: task.OriginInvestigation, Parent: "t-0", Investigation: "inv-1", Step: 2}); err == nil {
		t.Fatal("Submit under an ended context returned no error without a record")
	}
	msgs, err := src.Receive(t.Context(), 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v; want the valid call", len(msgs), err)
	}
	var sent task.Task
	if err := json.Unmarshal(msgs[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.ID != "inv-1-s2" || !sent.CreatedAt.Equal(clk.Now()) || sent.OriginToken == "" {
		t.Fatalf("queued %+v: want the call, stamped now and signed", sent)
	}
	if err := v.Validate(&sent, clk.Now()); err != nil {
		t.Fatalf("the queued call does not verify: %v", err)
	}
}

// silentModel is a provider never asked anything here.
type silentModel struct{}

func (silentModel) Name() string { return "silent" }

func (silentModel) Complete(context.Context, report.Request) (report.Response, error) {
	return report.Response{}, nil
}

// TestNewLeavesReportPartsAlone: the hooks build their report queue,
// limiter backend and investigation on their own copy of the parts; the
// caller's stay as given (they were filled in by New before).
func TestNewLeavesReportPartsAlone(t *testing.T) {
	cfg, err := config.Load([]byte(`
diagnostics:
  - {name: df, command: [/bin/df], timeout: 10s, investigate: true}
limiter: {hosts: {allow: ['^web-[0-9]+$']}}
report: {enabled: true, provider: openai, base_url: 'http://127.0.0.1:1/v1', api_key_env: K, model: m, investigate: {max_steps: 2}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := cfg.CompileCatalog()
	if err != nil {
		t.Fatal(err)
	}
	parts := &ReportParts{Provider: silentModel{}}
	if _, err := New(Options{Config: cfg, Store: state.NewMemory(state.MemoryOptions{}), Reports: parts, Validator: v,
		Clock: clock.Wall{}, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Base: t.Context()}); err != nil {
		t.Fatal(err)
	}
	if parts.Writer != nil || parts.Queue != nil || parts.Backend != nil || parts.Budget != nil {
		t.Fatalf("New wrote into the caller's parts: %+v", *parts)
	}
}
