package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// Runner executes one diagnostic's argv; *runner.Runner is the real one.
type Runner interface {
	Run(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result
}

var _ Runner = (*runner.Runner)(nil)

// Decider is the part of the limiter the pipeline asks: a decision, then,
// for an allowed run, renewals of what it holds (concurrency slots, the
// breaker probe) with the task's lease and its outcome when it ends.
type Decider interface {
	Allow(ctx context.Context, r limiter.Request) (limiter.Decision, error)
	Renew(ctx context.Context, r limiter.Request, lease time.Duration) error
	Done(ctx context.Context, r limiter.Request, outcome string) error
	// Fold prepares the decision of r to run in the claim's script (one
	// round trip for both); ok is false when it cannot (no Redis backend).
	Fold(r limiter.Request) (f *limiter.Folded, ok bool)
	// DoneCalls is Done as script calls for the finish's round trip; ok
	// is false when the limiter cannot make them (no Redis backend).
	DoneCalls(r limiter.Request, outcome string) (calls []limiter.ScriptCall, ok bool)
}

var _ Decider = (*limiter.Limiter)(nil)

// Bounds of the pipeline's calls. Each call gets a context of its own,
// created right before it, so that a diagnostic running for minutes never
// leaves the bookkeeping after it with an expired context. Store calls are
// bounded by redis.timeout (storeCalls).
const (
	// QueueCallTimeout bounds one queue call (delete, visibility,
	// dead-letter); the SQS client retries within it.
	QueueCallTimeout = 30 * time.Second
	// decideTimeout bounds one limiter decision; the limiter bounds its
	// own Redis round trip by redis.timeout and applies the fail mode.
	decideTimeout = 30 * time.Second
	// lookAgainMargin is added to a deferral that waits for a lease held
	// elsewhere, so the message comes back after the lease has ended.
	lookAgainMargin = 5 * time.Second
	// RetryBase and retryMax shape the backoff of a message handed back
	// because something it needs failed (the state store with
	// redis.state_fail closed, the dead-letter send): RetryBase doubled
	// per receive, at most retryMax, with jitter (see retryDelay).
	RetryBase = 2 * time.Second
	retryMax  = 5 * time.Minute
	// maxDefer is SQS's longest visibility timeout.
	maxDefer = 12 * time.Hour
	// rejectMarkTTL is how long a rejected message's first outcome is
	// remembered: SQS's longest message retention, so no redelivery of it
	// is counted twice.
	rejectMarkTTL = 14 * 24 * time.Hour
)

// pipeline takes each received message to its outcome: validate (or
// route an alarm), then claim → decide (claimer), run → record → finish
// (finisher), ack or hand back (messages). Each step is one method of the
// type named after its role; every end goes through the outcome recorder.
type pipeline struct {
	// specs are the catalog's diagnostics, resolved once; a valid task's
	// job carries its own (validate).
	specs     map[string]spec
	src       queue.Source
	marks     state.Marks
	validator Validator
	outcomes  *outcomeRecorder
	drain     Tracker
	clock     clock.Clock
	log       *slog.Logger
	redactor  *redact.Redactor
	trace     traceOptions

	calls  *storeCalls
	leases *leases
	msgs   *messages
	claims *claimer
	fin    *finisher

	// receive bounds received messages whose run has not ended (the
	// receive window, window.go); handed bounds the tasks handed here
	// whose run has not ended (handedHeldMax, TakeHanded); run bounds
	// running diagnostics (workers).
	receive *window
	handed  *semaphore.Weighted
	run     *semaphore.Weighted
	// hard ends on a fast exit: running work is killed and released.
	hard context.Context
	// waiting counts received messages whose handler has not taken a
	// worker slot yet (nor ended): the intake's prefetch in hand; idle is
	// signalled (non-blocking) each time it drops to 0.
	waiting atomic.Int64
	idle    chan struct{}

	handlers sync.WaitGroup
	// goroutines runs the handlers (counted in handlers).
	goroutines *handlerGoroutines

	// alerts routes alarms received on the task queue; nil = none.
	alerts *AlertRouting
	// ranOn is this agent, as each run's record names where it ran.
	ranOn taskview.RanOn
	// placer sends a target task to its host's agent (place.go); nil =
	// every task runs where it is received.
	placer *placer
	// approvals gates the diagnostics with approval: required; nil =
	// none gated.
	approvals Approvals
}

// accept tracks a received message and starts its handler. The queue
// keeps the message hidden from the moment it is accepted until its
// handler ends, whether it waits for a worker or runs.
func (p *pipeline) accept(m *queue.Message) { p.take(m, nil, func() { p.receive.Release(1) }) }

// take is accept for a message received from the queue (h nil) or handed
// here by the agent that received it (h): a handed task was counted in
// autodiag_tasks_received_total there, so it is not counted again, and its
// hand-off delay is observed when it starts. free gives back the intake
// slot the message took (of the receive window, or of the handed tasks
// held), once its run has ended.
func (p *pipeline) take(m *queue.Message, h *handed, free func()) {
	p.outcomes.received(h == nil)
	p.waiting.Add(1)
	j := &job{msg: m, received: p.clock.Now(), freeIntake: free}
	if h != nil {
		j.handedAt = h.ReceivedAt
	}
	j.ctx, j.span = p.trace.process(m)
	unhold := p.src.Hold(m)
	// A message taken once the drain has begun is released at once, by
	// Track. That release (a visibility change and an audit entry) runs
	// on the message's own handler goroutine, not here: the intake ends
	// only once its last take has returned, and the drain ends only once
	// the intake has, so a batch released here in turn, a call after the
	// other, would hold the drain with nothing running.
	// A release asked for before Track has returned is left to the
	// handler; one asked for later (the drain's start, its deadline)
	// runs where it is asked.
	const tracking, tracked, toHandler = 0, 1, 2
	var st atomic.Int32
	release := func() { p.msgs.handBack(j, back{why: backDrain, detail: detailDrain}) }
	j.item = p.drain.Track(func() {
		if st.CompareAndSwap(tracking, toHandler) {
			return
		}
		release()
	})
	releaseFirst := !st.CompareAndSwap(tracking, tracked)
	p.goroutines.Go(func() {
		defer unhold()
		if releaseFirst {
			release()
		}
		p.handle(j)
	})
}

// wait returns once every handler has; the intake has ended.
func (p *pipeline) wait() {
	p.goroutines.close()
	p.handlers.Wait()
}

// handle takes one message to its outcome.
func (p *pipeline) handle(j *job) {
	// A drain waits for the item, so for the delete too; the slots are
	// freed earlier (see ack).
	defer j.item.Done()
	defer j.span.End()
	haveRun := false
	// The receive slot bounds the messages received ahead of their run:
	// once the diagnostic has ended it goes back, so that the next
	// messages are received while this one is recorded. The worker slot,
	// held until the task's end, bounds the tasks being recorded.
	freeReceive := sync.OnceFunc(j.freeIntake)
	j.freeSlots = sync.OnceFunc(func() {
		if haveRun {
			p.run.Release(1)
		}
		freeReceive()
	})
	defer func() { j.freeSlots() }()
	started := sync.OnceFunc(func() {
		if p.waiting.Add(-1) == 0 {
			select {
			case p.idle <- struct{}{}:
			default:
			}
		}
	})
	defer started()

	// A body that decodes as a task is one: only one that does not may be
	// an alarm (tasks refuse the members every alarm shape has), so a task
	// never passes through the alert routing.
	t, err := task.Decode(j.msg.Body)
	if err != nil && p.routeAlert(j) {
		return
	}
	_, vspan := tracing.Start(j.ctx, "validate", trace.SpanKindInternal)
	err = p.validate(j, t, err)
	traceTask(j.span, j.task)
	tracing.Fail(vspan, err)
	vspan.End()
	if err != nil {
		p.reject(j, err)
		return
	}
	if p.approve(j) {
		return
	}
	if p.place(j) {
		return
	}
	if err := p.run.Acquire(p.hard, 1); err != nil {
		// A fast exit: the worker, not the drain, gives it back.
		j.item.HandedBack()
		p.msgs.handBack(j, back{why: backDrain, detail: detailDrain})
		return
	}
	haveRun = true
	started()
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(p.hard))
	defer cancelRun()
	stop := context.AfterFunc(p.hard, cancelRun)
	defer stop()
	if !j.item.Start(cancelRun) {
		return // the drain released it
	}
	p.execute(j, func() runner.Result {
		res := p.fin.runTask(runCtx, j)
		freeReceive()
		return res
	})
}

// validate checks the message's task, decoded as t (err: how its decode
// failed), before anything shared is touched; a task without an id takes
// the message's.
func (p *pipeline) validate(j *job, t task.Task, err error) error {
	if t.ID == "" {
		t.ID = j.msg.ID
	}
	if err == nil {
		err = p.validator.Validate(&t, p.clock.Now())
	}
	j.mu.Lock()
	j.task = t
	j.mu.Unlock()
	j.spec = p.specs[t.Diagnostic]
	return err
}

// execute is claim → decide → run → record for one valid task; run runs
// the diagnostic on the run's own context.
func (p *pipeline) execute(j *job, run func() runner.Result) {
	t := j.task
	if !p.leases.markRunning(t.ID) {
		p.msgs.handBack(j, back{why: backRunningHere, after: p.leases.lease + lookAgainMargin,
			attrs: []any{"detail", "a duplicate delivery of a task running here"}})
		return
	}
	defer p.leases.unmarkRunning(t.ID)
	claimed := p.clock.Now()
	_, cspan := tracing.Start(j.ctx, "claim", trace.SpanKindInternal)
	rec, ok := p.claims.claim(j)
	cspan.End()
	if !ok {
		return
	}

	if p.denied(j, rec) {
		return
	}
	if !p.claims.decide(j, rec) {
		return
	}
	if !p.claims.stillOurs(j, claimed) {
		return
	}
	// The diagnostic runs here: from now on the record says so. A task
	// that ends before this point never ran and names no machine.
	ranOn := p.ranOn
	rec.RanOn = &ranOn
	traceRanOn(j.span, ranOn)
	p.outcomes.handedStart(j)
	_, rspan := tracing.Start(j.ctx, "run "+t.Diagnostic, trace.SpanKindInternal, tracing.KeyDiagnostic.String(t.Diagnostic))
	traceRanOn(rspan, ranOn)
	res := run()
	traceRun(rspan, res)
	rspan.End()
	// The run is over: give its slots back before the bookkeeping, so the
	// next task of the key need not wait for the record and the delete.
	p.claims.limiterDone(j, res.Outcome)
	_, recspan := tracing.Start(j.ctx, "record", trace.SpanKindInternal)
	p.fin.record(j, rec, res)
	recspan.End()
}

// reject ends an invalid or stale message. A rejected message has one
// outcome however often it is delivered: the first delivery (by message
// id, marked in the store) writes it; every delivery tries the dead-letter
// copy, and one whose copy fails comes back after a backoff by its
// receive count to try again. Nothing from the body keys the mark, as the
// task is invalid.
func (p *pipeline) reject(j *job, err error) {
	reason := task.Reason(err)
	if reason == task.ReasonStale {
		p.outcomes.end(j, ended{outcome: outcome.Stale, reason: reason, detail: err.Error()})
		p.msgs.ack(j)
		return
	}
	if j.msg.ReceiveCount >= 5 {
		p.log.WarnContext(j.context(), "poison message suspect: received many times", "task_id", task.QuoteID(j.task.ID), "receive_count", j.msg.ReceiveCount)
	}
	first := true
	if p.marks != nil {
		merr := p.calls.storeCall(func(ctx context.Context) (err error) {
			first, err = p.marks.MarkOnce(ctx, "rejected:"+j.msg.ID, rejectMarkTTL)
			return err
		})
		if merr != nil {
			// Counting a reject twice beats losing it.
			p.calls.degraded("mark")
			p.log.WarnContext(j.context(), "state store unavailable; the rejected message is counted without knowing whether it was before",
				"task_id", task.QuoteID(j.task.ID), "message_id", j.msg.ID, "err", merr)
			first = true
		}
	}
	if first {
		p.outcomes.end(j, ended{outcome: outcome.Rejected, reason: reason, detail: err.Error()})
	} else {
		p.log.DebugContext(j.context(), "rejected message delivered again; its outcome is already written", "task_id", task.QuoteID(j.task.ID),
			"message_id", j.msg.ID, "receive_count", j.msg.ReceiveCount)
		p.outcomes.drop(j)
	}
	switch dlErr := p.msgs.queueCall(func(ctx context.Context) error {
		return p.src.DeadLetter(ctx, j.msg, p.redactor.RedactString(deadReason(reason, err)))
	}); {
	case dlErr == nil:
	case errors.Is(dlErr, queue.ErrNoDeadLetter):
		// Left to the queue's redrive policy.
	default:
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "dead-letter failed; the message comes back to try again", "task_id", task.QuoteID(j.task.ID), "message_id", j.msg.ID,
			"retry_after", delay.Seconds(), "err", dlErr)
		p.msgs.handBack(j, back{why: backRetry, after: delay})
	}
}

// retryDelay is how long a message handed back after a failure waits,
// by how often it was received: RetryBase doubled per earlier receive, at
// most retryMax, less a random part of up to half so that messages failing
// together do not come back together.
func retryDelay(receiveCount int) time.Duration {
	d := retryMax
	if n := max(receiveCount-1, 0); n < 20 {
		d = min(RetryBase<<n, retryMax)
	}
	return d - rand.N(d/2+1)
}

// concurrencyDelay is how long a message denied by a concurrency cap
// waits: the holder's lease (retryAfter) bounds when its slot is free at
// the latest, but a holder usually ends far sooner, and a run of the
// denied diagnostic ends within its timeout, so the message comes back
// after at most that, with jitter over the upper half so that messages
// denied together do not come back together; at least a second.
func concurrencyDelay(retryAfter, runTimeout time.Duration) time.Duration {
	d := retryAfter
	if runTimeout > 0 && runTimeout < d {
		d = runTimeout
	}
	d = d/2 + rand.N(d/2+1)
	return max(d, time.Second)
}

// deadReason is the dead-letter attribute of a rejected message: the
// reason, then the error, without saying the reason twice when the error
// starts with it (a *task.Error does).
func deadReason(reason string, err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, reason+": ") {
		return msg
	}
	return reason + ": " + err.Error()
}
