package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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
	// buffered is the number of received messages waiting for a worker;
	// idle is signalled (non-blocking, capacity 1) when it drops to 0.
	buffered func() int
	idle     chan struct{}
	log      *slog.Logger
	accept   func(*queue.Message)
}

// gather holds on to n slots and, while received messages still wait for
// a worker (the workers have work), waits for more to free up, so that one
// receive fetches a batch rather than each ended task costing a receive
// of one. Once nothing waits it returns what it holds, so a worker idles
// for at most the receive. It returns the slots it holds; an error only
// when ctx ended.
func (in *intake) gather(ctx context.Context, n int64) (int64, error) {
	if in.buffered == nil || in.idle == nil {
		return n, nil
	}
	for n < int64(in.batch) {
		select {
		case <-in.idle: // a stale signal; the count below decides
		default:
		}
		if in.buffered() == 0 {
			return n, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-in.idle:
				cancel()
			case <-wctx.Done():
			}
		})
		err := in.slots.Acquire(wctx, 1)
		cancel()
		wg.Wait()
		switch {
		case err == nil:
			n = in.topUp(n + 1)
		case ctx.Err() != nil:
			return n, ctx.Err()
		}
		// else: nothing waits any more; the loop sees it.
	}
	return n, nil
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
		n, err := in.gather(ctx, in.topUp(1))
		if err != nil {
			in.slots.Release(n)
			return
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
