package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
)

// receiveWindowConfig has one worker, so a window of 1 + max(1, 1/4) = 2
// received messages, each received as soon as its slot is free.
const receiveWindowConfig = `
workers: 1
queue: {visibility_timeout: 1m, batch_size: 1}
diagnostics:
  - {name: check, command: [/bin/true], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 1m}
`

// gatedFinish holds every Finish until gate closes (or its call times out).
type gatedFinish struct {
	state.Store
	gate chan struct{}
}

func (s gatedFinish) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Finish(ctx, rec, x)
}

// TestReceiveWindowFreedWhenTheRunEnds: a task whose diagnostic has ended
// no longer counts against the messages received ahead (workers +
// prefetch), so the next ones are received while it is recorded; its
// worker slot, held until the record is written, still keeps the next
// diagnostic from starting.
func TestReceiveWindowFreedWhenTheRunEnds(t *testing.T) {
	t.Parallel()
	store := gatedFinish{Store: state.NewMemory(state.MemoryOptions{}), gate: make(chan struct{})}
	var runs atomic.Int64
	run := func(context.Context, runner.Diagnostic, []string) runner.Result {
		runs.Add(1)
		return runner.Result{Outcome: outcome.Succeeded, Duration: 0}
	}
	a, src, stop := endLabWith(t, receiveWindowConfig, store, nil, nil, run)
	const tasks = 4
	for i := 1; i <= tasks; i++ {
		if _, err := src.Send(context.Background(), []byte(fmt.Sprintf(`{"id":"win-%d","host":"web-01","diagnostic":"check"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	// The first task's record is held: it, the message waiting for the
	// worker and one more received into the window it gave back.
	waitFor(t, "three messages received", func() bool { _, inflight := src.Len(); return inflight == 3 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d diagnostics started while the first task's record was held, want 1", n)
	}
	close(store.gate)
	waitFor(t, "every task's end", func() bool { return a.Status().Outcomes[outcome.Succeeded] == tasks })
	stop()
	if n := runs.Load(); n != tasks {
		t.Errorf("%d runs, want %d", n, tasks)
	}
}
