package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
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

// pipeline takes each received message to its outcome. Its methods are
// the task's life, in this file in the order it is lived: accept →
// validate (or reject) → wait for approval → place (or hand to the agent
// of the task's host) → claim → decide → run → record → finish → ack, and
// the hand-back that ends any step early. Every end goes through the
// outcome recorder (outcome.go); the lease kept alive while a task runs is
// the leases' (lease.go), a finish the store could not take the backlog's
// (backlog.go).
type pipeline struct {
	// specs are the catalog's diagnostics, resolved once; a valid task's
	// job carries its own (validate).
	specs     map[string]spec
	src       queue.Source
	store     Store
	limiter   Decider
	runner    Runner
	hooks     Hooks
	validator Validator
	outcomes  *outcomeRecorder
	drain     Tracker
	clock     clock.Clock
	log       *slog.Logger
	redactor  *redact.Redactor
	trace     traceOptions
	// uploadMax is results.s3.max_size when the whole output of each run
	// is uploaded, else 0.
	uploadMax  runner.Size
	instanceID string
	lease      time.Duration // queue.visibility_timeout
	dedupeKey  string        // limiter.dedupe.key
	stateFail  string        // redis.state_fail

	calls   *storeCalls
	leases  *leases
	backlog *recordBacklog

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

// accept tracks a received message, held since its receive (unhold ends
// the hold), and starts its handler.
func (p *pipeline) accept(m *queue.Message, unhold func()) {
	p.take(m, nil, func() { p.receive.Release(1) }, unhold)
}

// take is accept for a message received from the queue (h nil) or handed
// here by the agent that received it (h): a handed task was counted in
// autodiag_tasks_received_total there, so it is not counted again, and its
// hand-off delay is observed when it starts. free gives back the intake
// slot the message took (of the receive window, or of the handed tasks
// held), once its run has ended; unhold ends the message's queue Hold,
// once its handler has ended.
func (p *pipeline) take(m *queue.Message, h *handed, free, unhold func()) {
	p.outcomes.received(h == nil)
	p.waiting.Add(1)
	j := &job{msg: m, received: p.clock.Now(), freeIntake: free}
	if h != nil {
		j.handedAt = h.ReceivedAt
	}
	j.ctx, j.span = p.trace.process(m)
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
	release := func() { p.handBack(j, back{why: backDrain, detail: detailDrain}) }
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
		p.handBack(j, back{why: backDrain, detail: detailDrain})
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
		res := p.runTask(runCtx, j)
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
	j.task, j.shown = t, quoteNames(t)
	j.mu.Unlock()
	if p.dedupeKey != "" {
		j.dedupe, _ = t.Field(p.dedupeKey)
	}
	j.spec = p.specs[t.Diagnostic]
	return err
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
		p.ack(j)
		return
	}
	if j.msg.ReceiveCount >= 5 {
		p.log.WarnContext(j.context(), "poison message suspect: received many times", "task_id", task.QuoteID(j.task.ID), "receive_count", j.msg.ReceiveCount)
	}
	first := true
	if p.store != nil {
		merr := p.calls.storeCall(func(ctx context.Context) (err error) {
			first, err = p.store.MarkOnce(ctx, "rejected:"+j.msg.ID, rejectMarkTTL)
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
	switch dlErr := p.queueCall(func(ctx context.Context) error {
		return p.src.DeadLetter(ctx, j.msg, p.redactor.RedactString(deadReason(reason, err)))
	}); {
	case dlErr == nil:
	case errors.Is(dlErr, queue.ErrNoDeadLetter):
		// Left to the queue's redrive policy.
	default:
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "dead-letter failed; the message comes back to try again", "task_id", task.QuoteID(j.task.ID), "message_id", j.msg.ID,
			"retry_after", delay.Seconds(), "err", dlErr)
		p.handBack(j, back{why: backRetry, after: delay})
	}
}

// approve is the approval gate, after validate and before placement and
// the worker slot: true when the job is done here, parked for a person's
// decision (the message acknowledged once the store holds the task, so it
// holds no worker, receive slot or concurrency slot while it waits) or
// handed back because the store did not answer. A decided task goes on
// with its decision in j.approval: approved, it runs the normal path and
// the limiter decides now; denied, execute ends it after the claim.
func (p *pipeline) approve(j *job) bool {
	if p.approvals == nil {
		return false
	}
	d := j.spec.run
	if d.Approval != runner.ApprovalRequired {
		return false
	}
	ctx, span := tracing.Start(j.context(), "approval", trace.SpanKindInternal)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, gateTimeout)
	ap, err := p.approvals.Gate(ctx, j.task, j.msg.Body, d.ApprovalTimeout)
	cancel()
	t := j.task
	switch {
	case err != nil:
		tracing.Fail(span, err)
		p.calls.degraded("approval")
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "approval store unavailable; task handed back", "task_id", t.ID, "retry_after", delay.Seconds(), "err", err)
		p.handBack(j, back{why: backRetry, after: delay})
		return true
	case ap == nil:
		p.log.InfoContext(j.context(), "task parked for approval", "task_id", t.ID, "host", t.Host, "diagnostic", t.Diagnostic, "origin", t.Origin)
		p.outcomes.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: AuditAwaitingApproval})
		p.outcomes.drop(j)
		p.ack(j)
		return true
	}
	attrs := approval.Attributes(ap)
	span.SetAttributes(attrs...)
	j.span.SetAttributes(attrs...)
	j.mu.Lock()
	j.approval = ap
	j.mu.Unlock()
	return false
}

// place runs before a valid task takes a worker: true when the task is
// dealt with here (handed, deferred to wait for its host's agent, or
// ended), false when it runs on this agent.
func (p *pipeline) place(j *job) bool {
	pl := p.placer
	if pl == nil || !pl.specs[j.task.Diagnostic].targeted {
		return false
	}
	t := j.task
	if pl.own[t.Host] {
		if ids := pl.ambiguous(t.Host); len(ids) > 1 {
			p.endAmbiguous(j, &state.AmbiguousHostError{Name: t.Host, IDs: ids})
			return true
		}
		pl.count(RoutingHere)
		p.canonical(j)
		return false
	}
	if pl.Hosts == nil {
		pl.count(ReasonNotThisHost)
		p.endUnplaced(j, pl.NotThisHost(t))
		return true
	}
	var owner state.HostOwner
	var found bool
	err := p.calls.storeCall(func(ctx context.Context) (err error) {
		owner, found, err = pl.Hosts.HostOwner(ctx, t.Host)
		return err
	})
	var amb *state.AmbiguousHostError
	switch {
	case errors.As(err, &amb):
		p.endAmbiguous(j, amb)
		return true
	case err != nil:
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "state store unavailable; cannot find the agent of the task's host, task handed back", "task_id", t.ID,
			"host", t.Host, "retry_after", delay.Seconds(), "err", err)
		p.handBack(j, back{why: backStateUnavailable, after: delay, detail: err.Error()})
		return true
	case found && owner.ID == pl.self:
		// This agent's record names it (a name learnt since start).
		pl.count(RoutingHere)
		p.canonical(j)
		return false
	}
	st := owner.State
	switch {
	case !found || st == "starting":
		// No agent owns it yet (an instance may be booting).
		return p.waitForOwner(j)
	case st == stateWarmed:
		pl.count(ReasonStandby)
		p.endUnplaced(j, &task.Error{Reason: ReasonStandby, Field: "host",
			Detail: fmt.Sprintf("the agent of %s (%s) is in a warm pool and runs no tasks", t.Host, owner.ID)})
		return true
	case st != stateRunning:
		pl.count(ReasonDraining)
		p.endUnplaced(j, &task.Error{Reason: ReasonDraining, Field: "host",
			Detail: fmt.Sprintf("the agent of %s (%s) is %s and takes no new tasks", t.Host, owner.ID, st)})
		return true
	}
	return p.hand(j, owner)
}

// hand gives j's message to owner's agent and lets the job go: the owner
// now holds the message and ends the task. A hand-off the store does not
// take sends the message back to be placed again.
func (p *pipeline) hand(j *job, owner state.HostOwner) bool {
	body, err := json.Marshal(handedOf(j.msg, p.placer.self, j.received))
	if err == nil {
		err = p.calls.storeCall(func(ctx context.Context) error {
			return p.placer.Hosts.GiveTask(ctx, owner.ID, string(body), handedTTL)
		})
	}
	if err != nil {
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "handing the task to its host's agent failed; the message comes back to try again", "task_id", j.task.ID,
			"host", j.task.Host, "owner", owner.ID, "retry_after", delay.Seconds(), "err", err)
		p.handBack(j, back{why: backStateUnavailable, after: delay, detail: err.Error()})
		return true
	}
	p.placer.count(RoutingHanded)
	p.log.DebugContext(j.context(), "task handed to its host's agent", "task_id", j.task.ID, "host", j.task.Host, "owner", owner.ID)
	p.outcomes.drop(j)
	return true
}

// execute is claim → decide → run → record for one valid task; run runs
// the diagnostic on the run's own context.
func (p *pipeline) execute(j *job, run func() runner.Result) {
	t := j.task
	if !p.leases.markRunning(t.ID) {
		p.handBack(j, back{why: backRunningHere, after: p.leases.lease + lookAgainMargin,
			attrs: []any{"detail", "a duplicate delivery of a task running here"}})
		return
	}
	defer p.leases.unmarkRunning(t.ID)
	claimed := p.clock.Now()
	_, cspan := tracing.Start(j.ctx, "claim", trace.SpanKindInternal)
	rec, ok := p.claim(j)
	cspan.End()
	if !ok {
		return
	}

	if p.denied(j, rec) {
		return
	}
	if !p.decide(j, rec) {
		return
	}
	if !p.stillOurs(j, claimed) {
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
	p.limiterDone(j, res.Outcome)
	_, recspan := tracing.Start(j.ctx, "record", trace.SpanKindInternal)
	p.record(j, rec, res)
	recspan.End()
}

// claim takes the task's execution lease; false when the job ended or was
// put back instead. When the store cannot answer within redis.timeout,
// redis.state_fail decides: open runs the task without a lease (j.leased
// false), closed hands the message back with backoff.
func (p *pipeline) claim(j *job) (state.TaskRecord, bool) {
	t := j.task
	var c state.Claim
	fold := p.foldable(j)
	err := p.calls.storeCall(func(ctx context.Context) (err error) {
		if fold != nil {
			// The limiter's decision runs in the claim's script, right
			// after the lease is taken: one round trip for both.
			var reply any
			var folded bool
			c, reply, folded, err = p.store.ClaimThen(ctx, newRecord(j, p.redactor), p.instanceID, p.lease,
				state.Then{Source: fold.Source, Keys: fold.Keys, Args: fold.Args})
			if folded {
				// No reply: the decision failed in the script; decide
				// asks the limiter on its own, which handles the error.
				if err == nil && c.Result == state.Claimed && reply != nil {
					j.folded, j.foldReply = fold, reply
				}
				return err
			}
		}
		c, err = p.store.Claim(ctx, newRecord(j, p.redactor), p.instanceID, p.lease)
		return err
	})
	if err != nil {
		p.calls.degraded("claim")
		if p.stateFail == config.StateFailClosed {
			// Without the lease exactly-once cannot be guaranteed: hand
			// the message back for a later attempt.
			delay := retryDelay(j.msg.ReceiveCount)
			p.log.WarnContext(j.context(), "state store unavailable; task handed back", "task_id", t.ID, "state_fail", p.stateFail,
				"retry_after", delay.Seconds(), "err", err)
			p.handBack(j, back{why: backStateUnavailable, after: delay, detail: err.Error()})
			return state.TaskRecord{}, false
		}
		p.log.WarnContext(j.context(), "state store unavailable; running the task without its lease", "task_id", t.ID, "state_fail", p.stateFail,
			"detail", "the message's visibility is the only guard against a second run", "err", err)
		return openRecord(j, p.redactor, p.instanceID, p.clock.Now()), true
	}
	switch c.Result {
	case state.AlreadyDone:
		p.outcomes.end(j, ended{outcome: outcome.Duplicate, reason: "already_done", detail: "ended earlier as " + c.Record.Outcome})
		p.ack(j)
		return state.TaskRecord{}, false
	case state.HeldElsewhere:
		p.handBack(j, back{why: backRunningElsewhere, after: c.LeaseRemaining + lookAgainMargin,
			attrs: []any{"detail", "running on another agent", "owner", c.Record.Owner}})
		return state.TaskRecord{}, false
	}
	j.leased = true
	return c.Record, true
}

// request is the limiter request of j's task. A slot or probe the
// decision takes is held under the task's lease, so that it lapses with
// the lease if this agent dies.
func (p *pipeline) request(j *job) limiter.Request {
	t := j.task
	req := limiter.Request{Host: t.Host, Diagnostic: t.Diagnostic, Severity: t.Severity, Origin: t.Origin, TaskID: t.ID, Lease: p.lease}
	if p.dedupeKey != "" {
		req.DedupeKey = j.dedupe
	}
	return req
}

// foldable is the prepared decision when it can ride in the claim's
// script (the limiter on Redis); nil when not, and the claim and Allow
// are two calls. The store's ClaimThen says whether it could fold it.
func (p *pipeline) foldable(j *job) *limiter.Folded {
	// No limiter (a worker that only claims): nothing to fold.
	if p.limiter == nil {
		return nil
	}
	f, ok := p.limiter.Fold(p.request(j))
	if !ok {
		return nil
	}
	return f
}

// denied ends a task whose approval was refused or not given in time,
// after its claim: outcome denied with its record, audit entry and
// notification; false when the task may run.
func (p *pipeline) denied(j *job, rec state.TaskRecord) bool {
	ap := j.approval
	if ap == nil || ap.Approved() {
		return false
	}
	reason, detail := approval.ReasonDenied, "denied by "+ap.By+" via "+ap.Via
	if ap.Decision == taskview.ApprovalTimeout {
		reason, detail = approval.ReasonTimeout, "unanswered within approval_timeout"
	}
	if ap.Reason != "" && ap.Decision != taskview.ApprovalTimeout {
		detail += ": " + ap.Reason
	}
	rec.Outcome, rec.Reason, rec.FinishedAt = outcome.Denied, reason, p.clock.Now()
	p.finish(j, rec, ended{outcome: outcome.Denied, reason: reason, detail: detail})
	p.ack(j)
	return true
}

// decide asks the limiter; false when the task must not run now (the job
// ended, or was deferred).
func (p *pipeline) decide(j *job, rec state.TaskRecord) bool {
	t := j.task
	req := p.request(j)
	var dec limiter.Decision
	_, lspan := tracing.Start(j.ctx, "limiter", trace.SpanKindInternal)
	err := callWithin(decideTimeout, func(ctx context.Context) (err error) {
		if f := j.folded; f != nil {
			// Decided already, in the claim's round trip.
			reply := j.foldReply
			j.folded, j.foldReply = nil, nil
			dec, err = f.Resolve(ctx, reply)
			return err
		}
		dec, err = p.limiter.Allow(ctx, req)
		return err
	})
	traceDecision(lspan, dec, err)
	lspan.End()
	switch {
	case err != nil:
		p.handBack(j, back{why: backLimiterCancelled, detail: err.Error()})
		return false
	case dec.Duplicate:
		rec.Outcome, rec.Reason = outcome.Duplicate, dec.Reason
		p.finish(j, rec, ended{outcome: outcome.Duplicate, reason: dec.Reason, detail: "same alert event within the dedupe ttl", decision: &dec})
		p.ack(j)
		return false
	case dec.Allowed:
		j.limitReq = &req
		j.mu.Lock()
		j.decision = &dec
		j.mu.Unlock()
		return true
	case dec.OnExceed == limiter.OnExceedDefer:
		// A concurrency denial defers by default: its retry_after is when
		// the earliest holder's lease ends, by which time the slot is free
		// (see concurrencyDelay for when the message comes back).
		delay := min(max(dec.RetryAfter, time.Second), maxDefer)
		if dec.Reason == limiter.ReasonConcurrency {
			delay = concurrencyDelay(delay, j.spec.run.Timeout)
		}
		fields := map[string]string{"rule": dec.Rule, "limit": dec.Limit, "retry_after": delay.String()}
		if s := shadowSummary(&dec); s != "" {
			fields["shadow"] = s
		}
		p.handBack(j, back{why: backLimited, after: delay, reason: dec.Reason, fields: fields,
			attrs: []any{"detail", "limited by rule " + dec.Rule, "host", t.Host, "rule", dec.Rule, "limit", dec.Limit}})
		return false
	default:
		rec.Outcome, rec.Reason, rec.Limiter = outcome.RateLimited, dec.Reason, limiterSummary(dec)
		p.finish(j, rec, ended{outcome: outcome.RateLimited, reason: dec.Reason, detail: "denied by rule " + dec.Rule, decision: &dec})
		p.ack(j)
		return false
	}
}

// stillOurs checks, right before the diagnostic starts, that the run is
// not starting long after its claim and its decision: an agent stopped
// between them and the start (SIGSTOP, a paused VM, a long stall) may have
// lost the lease to another agent that runs the task, and the limiter
// counted the run at its decision, so limits that hold for decision times
// (a minimum interval, a window) would not hold for this start. A start
// one renewal period (a third of the lease) or more after the claim is not
// made: the run's slots go back, its lease is given back and the message
// is deferred at once, to be claimed and decided again. A recent claim is
// not checked, so the common path costs nothing.
func (p *pipeline) stillOurs(j *job, claimed time.Time) bool {
	late := p.clock.Now().Sub(claimed)
	if late < p.lease/3 {
		return true
	}
	p.limiterDone(j, outcome.Released)
	p.handBack(j, back{why: backLimited, reason: reasonStaleDecision,
		attrs: []any{"detail", "the run would start long after its claim and decision (the agent was stopped or stalled); claimed and decided again",
			"late", late.Seconds()}})
	return false
}

// reasonStaleDecision is the deferral of a run that would have started a
// renewal period or more after its claim and decision (stillOurs).
const reasonStaleDecision = "stale_decision"

// runTask runs the diagnostic while keeping the lease alive; the queue's
// Hold keeps the message hidden.
func (p *pipeline) runTask(ctx context.Context, j *job) runner.Result {
	t := j.task
	keep := p.leases.keepAlive(ctx, j)
	defer keep()
	// Read past the cap, so that record redacts before it cuts.
	run := j.spec.run
	run.MaxOutput += redact.CutSlack
	return p.runner.Run(ctx, run, j.spec.diag.Args(t.Host, t.ID, t.Params))
}

// limiterDone tells the limiter that the allowed run of j ended, once:
// it gives back the run's slots and probe and counts a failed or timed_out
// run for the failure breakers. A cancelled run ends as released. The call
// is bounded by redis.timeout on a context of its own (it runs on a fast
// exit too); a failure is logged, as what it could not give back lapses
// with the lease.
func (p *pipeline) limiterDone(j *job, end string) {
	req := j.limitReq
	if req == nil {
		return
	}
	j.limitReq = nil
	if end == runner.Cancelled {
		end = outcome.Released
	}
	if end != outcome.Released && p.uploadMax == 0 {
		// A run's outcome: record's finish follows at once (no upload in
		// between to hold the slots through), and the calls ride in its
		// round trip.
		if calls, ok := p.doneCalls(j, *req, end); ok {
			j.limitDone = calls
			return
		}
	}
	if err := p.calls.storeCall(func(ctx context.Context) error { return p.limiter.Done(ctx, *req, end) }); err != nil {
		p.log.WarnContext(j.context(), "giving back the limiter's slots failed; they lapse with the lease", "task_id", req.TaskID,
			"outcome", end, "lease", p.lease.Seconds(), "err", err)
	}
}

// doneCalls is limiterDone as calls for the finish to send in its round
// trip (one fewer round trip per task on Redis); ok is false when the
// limiter cannot make them (no Redis backend). A call the store cannot
// send falls back to Done; a failed one is logged, and what it could not
// give back lapses with the lease.
func (p *pipeline) doneCalls(j *job, req limiter.Request, end string) ([]state.Call, bool) {
	if p.limiter == nil {
		return nil, false
	}
	sc, ok := p.limiter.DoneCalls(req, end)
	if !ok {
		return nil, false
	}
	failed := func(err error) {
		p.log.WarnContext(j.context(), "giving back the limiter's slots failed; they lapse with the lease", "task_id", req.TaskID,
			"outcome", end, "lease", p.lease.Seconds(), "err", err)
	}
	calls := make([]state.Call, len(sc))
	for i, c := range sc {
		calls[i] = state.Call{Script: c.Script, Source: c.Source, Keys: c.Keys, Args: c.Args,
			Fallback: func(ctx context.Context) {
				// Done makes every call itself: the first Fallback does.
				if i == 0 {
					if err := p.limiter.Done(ctx, req, end); err != nil {
						failed(err)
					}
				}
			},
			Done: func(err error) {
				if err != nil {
					failed(err)
				}
			}}
	}
	return calls, true
}

// record writes the run's result and ends the job.
func (p *pipeline) record(j *job, rec state.TaskRecord, res runner.Result) {
	if res.Outcome == runner.Cancelled {
		p.handBack(j, back{why: backCancelled, detail: detailCancelled})
		return
	}
	// The one chokepoint: nothing below stores, logs or sends the output
	// unredacted, and what is kept is cut from redacted text.
	res.Output, res.Truncated = p.redactCut(res, j.spec.run.MaxOutput)
	rec.Outcome = res.Outcome
	rec.ExitCode = new(res.ExitCode)
	rec.FinishedAt = p.clock.Now()
	// The upload takes the whole output and cuts res to max_output; the
	// record's string copy is made after it, of the cut output only.
	uspan := startUpload(j, p.uploadMax > 0)
	p.hooks.Keep(&rec, &res, j.spec.diag)
	endUpload(uspan, rec)
	rec.Output = string(res.Output)
	rec.Truncated = res.Truncated
	p.outcomes.m.Duration.WithLabelValues(j.task.Diagnostic).Observe(res.Duration.Seconds())
	reason := ""
	if res.Err != nil {
		reason = res.Err.Error()
	}
	p.finish(j, rec, ended{outcome: res.Outcome, reason: reason, result: &res})
	p.ack(j)
}

// redactCut redacts a run's output (read up to redact.CutSlack past its
// cap) and cuts it to what is kept: the diagnostic's max_output (with its
// default), or results.s3.max_size when the uploader takes the whole
// output.
func (p *pipeline) redactCut(res runner.Result, maxOutput runner.Size) ([]byte, bool) {
	limit := int(maxOutput)
	if p.uploadMax > 0 {
		limit = max(limit, int(p.uploadMax))
	}
	body := res.Output
	if res.Truncated {
		body = bytes.TrimSuffix(body, []byte(runner.TruncationMark))
	}
	out, cut := p.redactor.RedactCut(body, limit)
	if !res.Truncated && !cut {
		return out, false
	}
	return append(out[:len(out):len(out)], runner.TruncationMark...), true
}

// AuditRanOn is the audit entry field naming where a task ran, as
// "<instance id> (<hostname>)".
const AuditRanOn = "ran_on"

// finish writes a task's final record and ends j with e. The record, the
// outcome's audit entry, its notification and, for a run whose outcome is
// in report.on, its report job are one store call (one round trip to a
// standalone Redis); a record the store cannot take now is kept in the
// backlog with all of them and written when the store answers again.
func (p *pipeline) finish(j *job, rec state.TaskRecord, e ended) {
	writes := p.hooks.Writes(rec, p.specs[rec.Diagnostic].diag, e.result)
	entry := p.outcomes.auditEntry(j, e)
	if rec.RanOn != nil {
		// The audit names the machine as the record does.
		if entry.Fields == nil {
			entry.Fields = map[string]string{}
		}
		entry.Fields[AuditRanOn] = rec.RanOn.String()
	}
	// What the run gives back to the limiter rides ahead of the record,
	// once: a finish kept to try again goes without it.
	x := state.FinishExtras{ID: state.NewFinishID(), Audit: &entry, Calls: j.limitDone, Writes: writes}
	j.limitDone = nil
	err := p.calls.storeCall(func(ctx context.Context) error { return p.store.Finish(ctx, rec, x) })
	switch {
	case err == nil:
	case errors.Is(err, state.ErrSuperseded):
		// The lease lapsed while the diagnostic ran and another agent
		// claimed the task: its attempt owns the record, its notification
		// and its report. This run still ends in its own outcome (log,
		// metric, audit).
		p.log.WarnContext(j.context(), "lease lapsed while running", "task_id", rec.ID, "attempt", rec.Attempts,
			"detail", "a later attempt owns the record; this result is logged only")
	case errors.Is(err, state.ErrPartial):
		p.calls.degraded("audit")
		p.log.WarnContext(j.context(), "task record written without its audit entry", "task_id", rec.ID, "err", err)
	default:
		p.calls.degraded("finish")
		p.log.WarnContext(j.context(), "recording the result failed; kept to be written when the state store answers",
			"task_id", rec.ID, "err", err)
		x.Calls = nil
		p.backlog.keepRecord(pendingFinish{rec: rec, extras: x})
	}
	p.outcomes.close(j, e)
}

// ack deletes the message of a task that has ended. The task no longer
// needs its worker or its receive slot, so they are freed first: the
// delete is batched and may wait for a DeleteMessageBatch in flight, and a
// worker held through that wait idles for about as long as a no-op
// diagnostic runs. A message whose delete is pending is not hoarded work:
// should the delete fail, its redelivery ends as duplicate.
func (p *pipeline) ack(j *job) {
	if j.freeSlots != nil {
		j.freeSlots()
	}
	if err := p.queueCall(func(ctx context.Context) error { return p.src.Delete(ctx, j.msg) }); err != nil {
		p.log.WarnContext(j.context(), "delete failed; a redelivery will end as duplicate", "task_id", j.task.ID, "err", err)
	}
}

// handBack is the one way a message goes back to the queue: after b.after,
// without spending its way to the dead-letter queue (queue.Source.Defer),
// giving back the task's lease first where b.why says so, then ending,
// letting go or leaving the job as b.why says. Its log line, audit entry
// and outcome are those of the reason: "task ended" as released, "task
// deferred", or none for a retry (the caller logs why).
func (p *pipeline) handBack(j *job, b back) {
	if b.why == backDrain {
		j.release.Do(func() { p.sendBack(j, b) })
		return
	}
	p.sendBack(j, b)
}

// sendBack is handBack without the drain's once-per-job guard.
func (p *pipeline) sendBack(j *job, b back) {
	switch b.why {
	case backCancelled, backLimiterCancelled, backLimited:
		p.leases.releaseLease(j)
	}
	if err := p.queueCall(func(ctx context.Context) error { return p.src.Defer(ctx, j.msg, b.after) }); err != nil {
		p.log.WarnContext(j.context(), "handing the message back failed", "task_id", j.task.ID, "retry_after", b.after.Seconds(), "err", err)
	}
	reason := b.why.String()
	if b.reason != "" {
		reason = b.reason
	}
	switch b.why {
	case backDrain, backCancelled, backLimiterCancelled, backStateUnavailable:
		if b.why != backDrain && j.item != nil {
			// The drain counted the ones it released itself.
			j.item.HandedBack()
		}
		p.outcomes.end(j, ended{outcome: outcome.Released, reason: reason, detail: b.detail})
	case backRunningHere, backRunningElsewhere, backLimited, backTargetWait:
		t := j.task
		p.log.InfoContext(j.context(), "task deferred", append([]any{"task_id", t.ID, "reason", reason, "retry_after", b.after.Seconds()}, b.attrs...)...)
		p.outcomes.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: reason, Fields: b.fields})
		p.outcomes.drop(j)
	default:
		p.outcomes.drop(j)
	}
}

// queueCall runs one queue call, bounded by QueueCallTimeout.
func (p *pipeline) queueCall(call func(context.Context) error) error {
	return callWithin(QueueCallTimeout, call)
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
