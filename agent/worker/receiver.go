package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/autodiag/autodiag/agent/queue"
)

// Receive errors are retried after a capped exponential backoff with
// jitter: a queue that fails for a while is not polled every second by
// every agent of the fleet at once.
const (
	receiveRetryInitial = time.Second
	receiveRetryMax     = 30 * time.Second
)

// receiver receives messages while the agent runs: only as many as there
// are free slots in the receive window (window.go), each held (queue
// Source.Hold) as soon as it is received and handed to accept with its
// release. A slot is given back by whoever ends the message's job.
type receiver struct {
	src   queue.Source
	slots slotPool
	// observe, when set, is told of every receive that returned: how long
	// it took, how many messages it brought and whether that was as many
	// as it asked for (the window sizes itself from them).
	observe func(rtt time.Duration, got int, full bool)
	batch   int
	// buffered is the number of received messages waiting for a worker;
	// idle is signalled (non-blocking, capacity 1) when it drops to 0.
	buffered func() int
	idle     chan struct{}
	log      *slog.Logger
	accept   func(m *queue.Message, unhold func())
	trace    traceOptions
	// polls is the most receives that may be in flight at once while the
	// queue has a backlog (at least 1); pollsNow, when set, how many may
	// now (at most polls): the receive window's (window.receives).
	polls    int
	pollsNow func() int
	// receiving counts receives in flight: their messages are work on
	// its way, as much as the buffered ones.
	receiving atomic.Int64
}

// gather holds on to n slots and, while received messages still wait for
// a worker or another receive is in flight (the workers have work), waits
// for more to free up, so that one
// receive fetches a batch rather than each ended task costing a receive
// of one. Once nothing waits it returns what it holds, so a worker idles
// for at most the receive. It returns the slots it holds; an error only
// when ctx ended.
func (in *receiver) gather(ctx context.Context, n int64) (int64, error) {
	if in.buffered == nil || in.idle == nil {
		return n, nil
	}
	for n < int64(in.batch) {
		select {
		case <-in.idle: // a stale signal; the count below decides
		default:
		}
		if in.buffered() == 0 && in.receiving.Load() == 0 {
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
func (in *receiver) topUp(n int64) int64 {
	for n < int64(in.batch) && in.slots.TryAcquire(1) {
		n++
	}
	return n
}

// received is what one receive brought back, for the loop that started it.
type received struct {
	// full: the queue had at least as many messages as were asked for, so
	// more are likely waiting.
	full bool
}

// allowed is how many receives may be in flight now, at most polls.
func (in *receiver) allowed(polls int) int {
	if in.pollsNow == nil {
		return polls
	}
	return max(1, min(polls, in.pollsNow()))
}

// run receives until ctx ends (a drain or a fast exit) or the source is
// closed. One receive is in flight while the queue keeps up with the
// workers; while receives come back full (a backlog) and slots are free,
// up to polls run at once, so that a queue's round trip does not bound
// the agent at one batch per round trip. The slots still bound what is
// received. run returns after every receive it started has, and its
// messages were accepted.
func (in *receiver) run(ctx context.Context) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = receiveRetryInitial
	bo.MaxInterval = receiveRetryMax
	var boMu sync.Mutex
	polls := max(1, in.polls)
	done := make(chan received, polls)
	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight, full := 0, false
	for {
		// Take every answer in, then wait while another receive may not
		// start: as many are in flight as allowed, or the last came back
		// short (the queue keeps up with one).
	collect:
		for inFlight > 0 {
			select {
			case r := <-done:
				inFlight--
				full = r.full
				continue
			default:
			}
			if full && inFlight < in.allowed(polls) {
				break collect
			}
			select {
			case r := <-done:
				inFlight--
				full = r.full
			case <-ctx.Done():
				return
			}
		}
		if err := in.slots.Acquire(ctx, 1); err != nil {
			return
		}
		n, err := in.gather(ctx, in.topUp(1))
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			in.slots.Release(n)
			return
		}
		inFlight++
		in.receiving.Add(1)
		wg.Go(func() {
			r := in.receive(ctx, n, bo, &boMu)
			if r == nil {
				stop()
				return
			}
			done <- *r
		})
	}
}

// receive is one receive of up to n messages, for which n slots are held:
// the slots of messages that did not come go back, those that came are
// accepted. A failure is retried after the backoff, waited for here. nil
// when the intake ends (ctx ended or the source is closed).
func (in *receiver) receive(ctx context.Context, n int64, bo *backoff.ExponentialBackOff, boMu *sync.Mutex) *received {
	start := time.Now()
	msgs, err := in.src.Receive(ctx, int(n))
	// Each message is kept hidden from its receive until its handler
	// ends, whether it waits for a worker or runs. A receive that failed
	// brought nothing to hold.
	var unholds []func()
	if err == nil {
		unholds = make([]func(), len(msgs))
		for i, m := range msgs {
			unholds[i] = in.src.Hold(m)
		}
	}
	in.trace.receiveSpan(msgs, start)
	if in.observe != nil && err == nil {
		in.observe(time.Since(start), len(msgs), int64(len(msgs)) == n)
	}
	// Before its messages are accepted: a gather that sees neither them
	// nor the receive returns what it holds, which costs a smaller batch;
	// one that saw the receive still in flight after they started would
	// wait for a run to end.
	in.receiving.Add(-1)
	if extra := n - int64(len(msgs)); extra > 0 {
		in.slots.Release(extra)
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, queue.ErrClosed) {
			return nil
		}
		boMu.Lock()
		wait := bo.NextBackOff()
		boMu.Unlock()
		in.log.Warn("receive failed", "err", err, "retry_in", wait.Seconds())
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		return &received{}
	}
	boMu.Lock()
	bo.Reset()
	boMu.Unlock()
	for i, m := range msgs {
		in.accept(m, unholds[i])
	}
	return &received{full: int64(len(msgs)) == n}
}
