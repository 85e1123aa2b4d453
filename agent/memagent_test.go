package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/limiter"
)

// memAgent is an agent running on the memory queue, state and limiter.
type memAgent struct {
	*Agent
	src   *queue.Memory
	store state.Store
	done  chan error
}

// runMemAgent builds an agent from cfg with d (its Source, Store and
// Limiter the memory ones, filled in here) and runs it. stop drains it and
// fails the test when Run returns an error; callers defer it.
func runMemAgent(t *testing.T, cfg config.Config, d Deps) (ma *memAgent, stop func()) {
	t.Helper()
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ma = &memAgent{src: queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout}),
		store: state.NewMemory(state.MemoryOptions{}), done: make(chan error, 1)}
	d.Source, d.Store, d.Limiter = ma.src, ma.store, lim
	if ma.Agent, err = New(cfg, d); err != nil {
		t.Fatal(err)
	}
	go func() { ma.done <- ma.Run(context.Background()) }()
	return ma, func() {
		ma.Drain("test", "end of test")
		if err := <-ma.done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

// waitReport polls task id's record until it holds a report, within wait,
// and returns the record and the report.
func (ma *memAgent) waitReport(t *testing.T, id string, wait time.Duration) (state.TaskRecord, report.Result) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		rec, ok, err := ma.store.Task(context.Background(), id)
		if err == nil && ok && len(rec.Report) > 0 {
			var r report.Result
			if err := json.Unmarshal(rec.Report, &r); err != nil {
				t.Fatal(err)
			}
			return rec, r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report for %s within %s", id, wait)
		}
		time.Sleep(20 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
}
