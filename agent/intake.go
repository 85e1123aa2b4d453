package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
)

// Receive errors are retried after a capped exponential backoff with
// jitter: a queue that fails for a while is not polled every second by
// every agent of the fleet at once.
const (
	receiveRetryInitial = time.Second
	receiveRetryMax     = 30 * time.Second
)

// intake receives messages while the agent runs: only as many as there
// are free slots (workers plus a small prefetch), each handed to accept.
// A slot is given back by whoever ends the message's job.
type intake struct {
	src   queue.Source
	slots *semaphore.Weighted
	batch int
	// buffered is the number of received messages waiting for a worker.
	buffered func() int
	log      *slog.Logger
	accept   func(*queue.Message)
}

// topUp takes free slots, without waiting, until n are held or the batch
// is full.
func (in *intake) topUp(n int64) int64 {
	for n < int64(in.batch) && in.slots.TryAcquire(1) {
		n++
	}
	return n
}

// run receives until ctx ends (a drain or a fast exit) or the source is
// closed.
func (in *intake) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = receiveRetryInitial
	bo.MaxInterval = receiveRetryMax
	for {
		if err := in.slots.Acquire(ctx, 1); err != nil {
			return
		}
		n := in.topUp(1)
		// While received messages still wait for a worker, the workers
		// have work: wait for more slots, so that one receive fetches a
		// batch rather than each ended task costing a receive of one.
		// Once nothing waits, receive what fits, so a worker idles for
		// at most the receive.
		for n < int64(in.batch) && in.buffered != nil && in.buffered() > 0 {
			if err := in.slots.Acquire(ctx, 1); err != nil {
				in.slots.Release(n)
				return
			}
			n = in.topUp(n + 1)
		}
		msgs, err := in.src.Receive(ctx, int(n))
		if extra := n - int64(len(msgs)); extra > 0 {
			in.slots.Release(extra)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, queue.ErrClosed) {
				return
			}
			wait := bo.NextBackOff()
			in.log.Warn("receive failed", "err", err, "retry_in", wait.Seconds())
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		bo.Reset()
		for _, m := range msgs {
			in.accept(m)
		}
	}
}
