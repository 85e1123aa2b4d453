package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/autodiag/autodiag/agent/state"
)

// Bounds of the record backlog.
const (
	// backlogMax bounds the task records kept while the state store is
	// unreachable: at a few KiB to 64 KiB of output each, at most tens of
	// MiB, and more tasks than an agent runs in a typical outage. Past it
	// the oldest record is dropped (logged with its task id).
	backlogMax = 1000
	// backlogRetryInitial and BacklogRetryMax shape the flush loop's
	// capped exponential backoff (with jitter).
	backlogRetryInitial = time.Second
	BacklogRetryMax     = 30 * time.Second
)

// recordBacklog keeps the final records the state store could not take
// (redis.state_fail applies to the claim; a result is kept either way),
// oldest first, for a loop that writes them once the store answers.
type recordBacklog struct {
	store state.TaskStore
	calls *storeCalls
	log   *slog.Logger
	// hard ends the flush loop, which is one of handlers.
	hard     context.Context
	handlers *sync.WaitGroup

	mu       sync.Mutex
	recs     []pendingFinish
	flushing bool // the flush loop runs
}

// pendingFinish is one Finish the store could not take: the record with
// the writes that go with it (audit entry, notification, report job) and
// the finish id that keeps a retry from writing them twice.
type pendingFinish struct {
	rec    state.TaskRecord
	extras state.FinishExtras
}

// keepRecord adds rec to the backlog and starts the flush loop unless it
// runs. The loop is one of the pipeline's handlers, so Run waits for it.
func (b *recordBacklog) keepRecord(rec pendingFinish) {
	b.mu.Lock()
	b.pushLocked(rec)
	start := !b.flushing
	b.flushing = true
	b.mu.Unlock()
	if start {
		b.handlers.Go(b.flushBacklog)
	}
}

// pushLocked appends rec, dropping the oldest record past backlogMax.
func (b *recordBacklog) pushLocked(rec pendingFinish) {
	if len(b.recs) >= backlogMax {
		b.log.Error("state backlog full; the oldest unwritten task record is dropped",
			"task_id", b.recs[0].rec.ID, "outcome", b.recs[0].rec.Outcome, "backlog", backlogMax)
		b.recs = b.recs[1:]
	}
	b.recs = append(b.recs, rec)
}

// backlogged is the number of records waiting to be written.
func (b *recordBacklog) backlogged() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.recs)
}

// flushBacklog writes the backlog, oldest first, after a capped
// exponential backoff between attempts, until it is empty. When the agent
// stops (hard ends) it tries once more at once and logs what is left.
func (b *recordBacklog) flushBacklog() {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = backlogRetryInitial
	bo.MaxInterval = BacklogRetryMax
	for {
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-t.C:
		case <-b.hard.Done():
		}
		t.Stop()
		last := b.hard.Err() != nil
		progressed := b.flushOnce()
		b.mu.Lock()
		left := len(b.recs)
		if left == 0 || last {
			for _, pf := range b.recs {
				b.log.Error("the state store did not come back before the agent stopped; task record not written",
					"task_id", pf.rec.ID, "outcome", pf.rec.Outcome)
			}
			b.recs = nil
			b.flushing = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if progressed {
			bo.Reset()
		}
	}
}

// flushOnce writes backlogged records until one fails; it reports whether
// any left the backlog.
func (b *recordBacklog) flushOnce() bool {
	progressed := false
	for {
		b.mu.Lock()
		if len(b.recs) == 0 {
			b.mu.Unlock()
			return progressed
		}
		pf := b.recs[0]
		rec := pf.rec
		b.recs = b.recs[1:]
		b.mu.Unlock()
		err := b.calls.storeCall(func(ctx context.Context) error { return b.store.Finish(ctx, rec, pf.extras) })
		switch {
		case err == nil:
			b.log.Info("task record written after the state store came back", "task_id", rec.ID, "outcome", rec.Outcome)
		case errors.Is(err, state.ErrSuperseded):
			b.log.Warn("task record not written: a later attempt owns it", "task_id", rec.ID, "outcome", rec.Outcome)
		case errors.Is(err, state.ErrPartial):
			b.calls.degraded("audit")
			b.log.Warn("task record written after the state store came back, without its audit entry",
				"task_id", rec.ID, "outcome", rec.Outcome, "err", err)
		default:
			b.mu.Lock()
			if len(b.recs) < backlogMax {
				b.recs = append([]pendingFinish{pf}, b.recs...)
			} else {
				b.log.Error("state backlog full; the oldest unwritten task record is dropped",
					"task_id", rec.ID, "outcome", rec.Outcome, "backlog", backlogMax)
			}
			b.mu.Unlock()
			return progressed
		}
		progressed = true
	}
}
