package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/internal/detached"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/limiter"
)

// storeCalls bounds each store call by redis.timeout and counts the
// operations that could not reach the store
// (autodiag_state_degraded_total).
type storeCalls struct {
	timeout     time.Duration
	degradedOps *prometheus.CounterVec
}

// storeCall runs one store call, bounded by redis.timeout. A call that
// failed after more than ten times the timeout did not fail for the store: it
// cannot take that long while this process runs (the process was stopped,
// or starved of CPU, and its deadline passed meanwhile). It is made once
// more before redis.state_fail may decide; a claim made twice counts one
// attempt more, a finish carries its id.
func (sc *storeCalls) storeCall(call func(context.Context) error) error {
	start := time.Now()
	err := callWithin(sc.timeout, call)
	if err != nil && clock.Stopped(start, sc.timeout) {
		err = callWithin(sc.timeout, call)
	}
	return err
}

// callWithin runs one call on a fresh context bounded by d, created right
// before the call and detached from shutdown: bookkeeping happens
// mid-drain and after a long run too.
func callWithin(d time.Duration, call func(context.Context) error) error {
	return detached.Call(context.Background(), d, call)
}

// degraded counts a store operation that could not reach the store.
func (sc *storeCalls) degraded(op string) {
	sc.degradedOps.WithLabelValues(op).Inc()
}

// leases holds a task's execution lease in the store (claimed by the
// pipeline) while it runs, and the set of tasks running in this process.
type leases struct {
	store        state.LeaseStore
	limiter      Decider
	calls        *storeCalls
	log          *slog.Logger
	instanceID   string
	lease        time.Duration // queue.visibility_timeout
	storeTimeout time.Duration // redis.timeout

	// running holds the task ids executing in this process: the store's
	// lease is per owner, so a duplicate message reaching the agent that
	// already runs the task is caught here.
	runningMu sync.Mutex
	running   map[string]bool
}

func (l *leases) markRunning(id string) bool {
	l.runningMu.Lock()
	defer l.runningMu.Unlock()
	if l.running[id] {
		return false
	}
	l.running[id] = true
	return true
}

func (l *leases) unmarkRunning(id string) {
	l.runningMu.Lock()
	defer l.runningMu.Unlock()
	delete(l.running, id)
}

// releaseLease gives back the job's lease, when it has one.
func (l *leases) releaseLease(j *job) {
	if !j.leased {
		return
	}
	err := l.calls.storeCall(func(ctx context.Context) error { return l.store.Release(ctx, j.task.ID, l.instanceID) })
	if stateUnreachable(err) {
		// The lease expires by itself.
		l.calls.degraded("release")
	}
	logStoreErr(l.log, err)
}

// keepAlive renews the job's lease, and what its run holds in the
// limiter (slots, the breaker probe) with it, while its task runs (until
// ctx, the run's, ends), every third of the visibility timeout, each call
// bounded by redis.timeout; the returned func stops it and waits for a
// renewal under way. The message's visibility is the queue's Hold, taken
// when the message was accepted. A task run without a lease
// (redis.state_fail open) renews only the limiter's hold.
func (l *leases) keepAlive(ctx context.Context, j *job) func() {
	if !j.leased && j.limitReq == nil {
		return func() {}
	}
	k := &leaseKeeper{l: l, j: j, req: j.limitReq, parent: ctx, every: l.lease / 3}
	k.mu.Lock()
	k.t = time.AfterFunc(k.every, k.renew)
	k.mu.Unlock()
	return k.stop
}

// leaseKeeper is one task's keepAlive: a timer, not a goroutine with a
// ticker, and a context for the renewals made only when one is: nearly
// every task ends before its first renewal, and a goroutine, a ticker and
// a context per task showed in the agent's profile at hundreds of tasks a
// second (BenchmarkSQSIntake, agent-redis; BenchmarkKeepAlive).
type leaseKeeper struct {
	l      *leases
	j      *job
	req    *limiter.Request // what the run holds in the limiter; nil = none
	parent context.Context
	every  time.Duration

	mu       sync.Mutex
	t        *time.Timer
	stopped  bool
	cancel   context.CancelFunc // of the renewal under way, if any
	renewing sync.WaitGroup
}

// renew renews once, then sets the timer for the next renewal.
func (k *leaseKeeper) renew() {
	k.mu.Lock()
	if k.stopped || k.parent.Err() != nil {
		k.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(k.parent)
	k.cancel = cancel
	k.renewing.Add(1)
	k.mu.Unlock()
	defer k.renewing.Done()
	defer cancel()
	l, j := k.l, k.j
	if j.leased {
		l.renewLease(ctx, j, k.every)
	}
	if req := k.req; req != nil {
		cctx, ccancel := context.WithTimeout(ctx, min(l.storeTimeout, k.every))
		err := l.limiter.Renew(cctx, *req, l.lease)
		ccancel()
		if err != nil && ctx.Err() == nil {
			l.log.Warn("renewing the limiter's slots failed; they lapse with the lease unless a later renewal lands",
				"task_id", j.task.ID, "err", err)
		}
	}
	k.mu.Lock()
	if !k.stopped {
		k.t.Reset(k.every)
	}
	k.mu.Unlock()
}

// stop ends the renewals, cancels one under way and waits for it.
func (k *leaseKeeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.t.Stop()
	if k.cancel != nil {
		k.cancel()
	}
	k.mu.Unlock()
	k.renewing.Wait()
}

// renewLease renews the job's execution lease once, bounded by
// redis.timeout (at most every, the renewal period).
func (l *leases) renewLease(ctx context.Context, j *job, every time.Duration) {
	cctx, ccancel := context.WithTimeout(ctx, min(l.storeTimeout, every))
	err := l.store.Renew(cctx, j.task.ID, l.instanceID, l.lease)
	ccancel()
	if err == nil || ctx.Err() != nil {
		return
	}
	if stateUnreachable(err) {
		l.calls.degraded("renew")
	}
	logStoreErr(l.log, err)
	l.log.Warn("renewing the execution lease failed", "task_id", j.task.ID, "err", err)
}

// stateUnreachable reports whether err means the store did not answer
// (down, stalled past redis.timeout), as opposed to an answer.
func stateUnreachable(err error) bool {
	return err != nil && !errors.Is(err, state.ErrLeaseLost) && !errors.Is(err, state.ErrSuperseded)
}

// logStoreErr logs a state store error; a lost or superseded lease is an
// answer, not an error.
func logStoreErr(log *slog.Logger, err error) {
	if !stateUnreachable(err) {
		return
	}
	log.Warn("state store error", "err", err)
}
