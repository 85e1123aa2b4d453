package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
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
}

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
	src       queue.Source
	marks     state.Marks
	validator *task.Validator
	outcomes  *outcomeRecorder
	drain     *drain.Controller
	clock     clock.Clock
	log       *slog.Logger
	redactor  *redact.Redactor

	calls  *storeCalls
	leases *leases
	msgs   *messages
	claims *claimer
	fin    *finisher

	// receive bounds received-but-unfinished messages (workers +
	// prefetch); run bounds running diagnostics (workers).
	receive *semaphore.Weighted
	run     *semaphore.Weighted
	// hard ends on a fast exit: running work is killed and released.
	hard context.Context
	// waiting counts received messages whose handler has not taken a
	// worker slot yet (nor ended): the intake's prefetch in hand; idle is
	// signalled (non-blocking) each time it drops to 0.
	waiting atomic.Int64
	idle    chan struct{}

	handlers sync.WaitGroup

	// alerts routes alarms received on the task queue; nil = none.
	alerts *AlertRouting
}

// storeCalls bounds each store call by redis.timeout and counts the
// operations that could not reach the store
// (autodiag_state_degraded_total).
type storeCalls struct {
	timeout     time.Duration
	degradedOps *prometheus.CounterVec
}

// leases holds a task's execution lease in the store (claimed by the
// claimer) while it runs, and the set of tasks running in this process.
type leases struct {
	store        state.TaskStore
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

// messages is the queue side of a job's end: the message is acknowledged
// or handed back.
type messages struct {
	src      queue.Source
	leases   *leases
	outcomes *outcomeRecorder
	log      *slog.Logger
}

// claimer is the claim → decide step: the task's execution lease, then
// the limiter's decision; a task that must not run now ends or goes back
// here.
type claimer struct {
	store      state.TaskStore
	limiter    Decider
	catalog    map[string]runner.Diagnostic
	redactor   *redact.Redactor
	outcomes   *outcomeRecorder
	clock      clock.Clock
	log        *slog.Logger
	calls      *storeCalls
	leases     *leases
	msgs       *messages
	fin        *finisher
	instanceID string
	lease      time.Duration // queue.visibility_timeout
	dedupeKey  string        // limiter.dedupe.key
	stateFail  string        // redis.state_fail
}

// finisher is the run → record → finish step: the diagnostic runs with
// its lease kept alive, its output is redacted and cut, and the final
// record is written with the hooks' writes (or kept in the backlog).
type finisher struct {
	store     state.TaskStore
	runner    Runner
	catalog   map[string]runner.Diagnostic
	redactor  *redact.Redactor
	uploadMax runner.Size // results.s3.max_size when uploading, else 0
	hooks     Hooks
	outcomes  *outcomeRecorder
	clock     clock.Clock
	log       *slog.Logger
	calls     *storeCalls
	leases    *leases
	msgs      *messages
	backlog   *recordBacklog
}

// accept tracks a received message and starts its handler. The queue
// keeps the message hidden from the moment it is accepted until its
// handler ends, whether it waits for a worker or runs.
func (p *pipeline) accept(m *queue.Message) {
	p.outcomes.received()
	p.waiting.Add(1)
	j := &job{msg: m, received: p.clock.Now()}
	unhold := p.src.Hold(m)
	j.item = p.drain.Track(func() { p.msgs.handBack(j, back{why: backDrain, detail: detailDrain}) })
	p.handlers.Go(func() {
		defer unhold()
		p.handle(j)
	})
}

// wait returns once every handler has.
func (p *pipeline) wait() { p.handlers.Wait() }

// handle takes one message to its outcome.
func (p *pipeline) handle(j *job) {
	// A drain waits for the item, so for the delete too; the slots are
	// freed earlier (see ack).
	defer j.item.Done()
	haveRun := false
	// The receive slot bounds the messages received ahead of their run:
	// once the diagnostic has ended it goes back, so that the next
	// messages are received while this one is recorded. The worker slot,
	// held until the task's end, bounds the tasks being recorded.
	freeReceive := sync.OnceFunc(func() { p.receive.Release(1) })
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

	if p.routeAlert(j) {
		return
	}
	if err := p.validate(j); err != nil {
		p.reject(j, err)
		return
	}
	if err := p.run.Acquire(p.hard, 1); err != nil {
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

// validate decodes and checks the message's task before anything shared
// is touched; a task without an id takes the message's.
func (p *pipeline) validate(j *job) error {
	t, err := task.Decode(j.msg.Body)
	if t.ID == "" {
		t.ID = j.msg.ID
	}
	if err == nil {
		err = p.validator.Validate(&t, p.clock.Now())
	}
	j.mu.Lock()
	j.task = t
	j.mu.Unlock()
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
	rec, ok := p.claims.claim(j)
	if !ok {
		return
	}

	if !p.claims.decide(j, rec) {
		return
	}
	if !p.claims.stillOurs(j, claimed) {
		return
	}
	res := run()
	// The run is over: give its slots back before the bookkeeping, so the
	// next task of the key need not wait for the record and the delete.
	p.claims.limiterDone(j, res.Outcome)
	p.fin.record(j, rec, res)
}

// claim takes the task's execution lease; false when the job ended or was
// put back instead. When the store cannot answer within redis.timeout,
// redis.state_fail decides: open runs the task without a lease (j.leased
// false), closed hands the message back with backoff.
func (cl *claimer) claim(j *job) (state.TaskRecord, bool) {
	t := j.task
	var c state.Claim
	err := cl.calls.storeCall(func(ctx context.Context) (err error) {
		c, err = cl.store.Claim(ctx, newRecord(j, cl.redactor), cl.instanceID, cl.lease)
		return err
	})
	if err != nil {
		cl.calls.degraded("claim")
		if cl.stateFail == config.StateFailClosed {
			// Without the lease exactly-once cannot be guaranteed: hand
			// the message back for a later attempt.
			delay := retryDelay(j.msg.ReceiveCount)
			cl.log.Warn("state store unavailable; task handed back", "task_id", t.ID, "state_fail", cl.stateFail,
				"retry_after", delay.Seconds(), "err", err)
			cl.msgs.handBack(j, back{why: backStateUnavailable, after: delay, detail: err.Error()})
			return state.TaskRecord{}, false
		}
		cl.log.Warn("state store unavailable; running the task without its lease", "task_id", t.ID, "state_fail", cl.stateFail,
			"detail", "the message's visibility is the only guard against a second run", "err", err)
		return cl.openRecord(j), true
	}
	switch c.Result {
	case state.AlreadyDone:
		cl.outcomes.end(j, ended{outcome: outcome.Duplicate, reason: "already_done", detail: "ended earlier as " + c.Record.Outcome})
		cl.msgs.ack(j)
		return state.TaskRecord{}, false
	case state.HeldElsewhere:
		cl.msgs.handBack(j, back{why: backRunningElsewhere, after: c.LeaseRemaining + lookAgainMargin,
			attrs: []any{"detail", "running on another agent", "owner", c.Record.Owner}})
		return state.TaskRecord{}, false
	}
	j.leased = true
	return c.Record, true
}

// decide asks the limiter; false when the task must not run now (the job
// ended, or was deferred).
func (cl *claimer) decide(j *job, rec state.TaskRecord) bool {
	t := j.task
	// A slot or probe the decision takes is held under the task's lease,
	// so that it lapses with the lease if this agent dies.
	req := limiter.Request{Host: t.Host, Diagnostic: t.Diagnostic, Severity: t.Severity, Origin: t.Origin, TaskID: t.ID, Lease: cl.lease}
	if cl.dedupeKey != "" {
		req.DedupeKey, _ = t.Field(cl.dedupeKey)
	}
	var dec limiter.Decision
	err := callWithin(decideTimeout, func(ctx context.Context) (err error) {
		dec, err = cl.limiter.Allow(ctx, req)
		return err
	})
	switch {
	case err != nil:
		cl.msgs.handBack(j, back{why: backLimiterCancelled, detail: err.Error()})
		return false
	case dec.Duplicate:
		rec.Outcome, rec.Reason = outcome.Duplicate, dec.Reason
		cl.fin.finish(j, rec, ended{outcome: outcome.Duplicate, reason: dec.Reason, detail: "same alert event within the dedupe ttl", decision: &dec})
		cl.msgs.ack(j)
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
			delay = concurrencyDelay(delay, cl.catalog[t.Diagnostic].WithDefaults().Timeout)
		}
		fields := map[string]string{"rule": dec.Rule, "limit": dec.Limit, "retry_after": delay.String()}
		if s := shadowSummary(&dec); s != "" {
			fields["shadow"] = s
		}
		cl.msgs.handBack(j, back{why: backLimited, after: delay, reason: dec.Reason, fields: fields,
			attrs: []any{"detail", "limited by rule " + dec.Rule, "host", t.Host, "rule", dec.Rule, "limit", dec.Limit}})
		return false
	default:
		rec.Outcome, rec.Reason, rec.Limiter = outcome.RateLimited, dec.Reason, limiterSummary(dec)
		cl.fin.finish(j, rec, ended{outcome: outcome.RateLimited, reason: dec.Reason, detail: "denied by rule " + dec.Rule, decision: &dec})
		cl.msgs.ack(j)
		return false
	}
}

// runTask runs the diagnostic while keeping the lease alive; the queue's
// Hold keeps the message hidden.
func (f *finisher) runTask(ctx context.Context, j *job) runner.Result {
	t := j.task
	diag := f.catalog[t.Diagnostic]
	keep := f.leases.keepAlive(ctx, j)
	defer keep()
	// Read past the cap, so that record redacts before it cuts.
	run := diag.WithDefaults()
	run.MaxOutput += redact.CutSlack
	return f.runner.Run(ctx, run, diag.Args(t.Host, t.ID, t.Params))
}

// stillOurs checks, right before the diagnostic starts, that a lease
// claimed more than one renewal period ago is still this agent's: an agent
// stopped between its claim and the start (SIGSTOP, a paused VM, a long
// stall) may have lost the lease to another agent that runs the task, and
// starting it here too would run it twice. A fresh lease is not checked, so
// the common path costs no round trip; a store that cannot answer leaves
// the run to go ahead, as the keeper's renewals do.
func (cl *claimer) stillOurs(j *job, claimed time.Time) bool {
	if !j.leased || cl.clock.Now().Sub(claimed) < cl.lease/3 {
		return true
	}
	err := cl.calls.storeCall(func(ctx context.Context) error { return cl.store.Renew(ctx, j.task.ID, cl.instanceID, cl.lease) })
	if !errors.Is(err, state.ErrLeaseLost) {
		if stateUnreachable(err) {
			cl.calls.degraded("renew")
		}
		return true
	}
	cl.limiterDone(j, outcome.Released)
	cl.msgs.handBack(j, back{why: backRunningElsewhere, after: cl.lease + lookAgainMargin,
		attrs: []any{"detail", "the lease lapsed between the claim and the start; another agent holds it"}})
	return false
}

// limiterDone tells the limiter that the allowed run of j ended, once:
// it gives back the run's slots and probe and counts a failed or timed_out
// run for the failure breakers. A cancelled run ends as released. The call
// is bounded by redis.timeout on a context of its own (it runs on a fast
// exit too); a failure is logged, as what it could not give back lapses
// with the lease.
func (cl *claimer) limiterDone(j *job, end string) {
	req := j.limitReq
	if req == nil {
		return
	}
	j.limitReq = nil
	if end == runner.Cancelled {
		end = outcome.Released
	}
	if err := cl.calls.storeCall(func(ctx context.Context) error { return cl.limiter.Done(ctx, *req, end) }); err != nil {
		cl.log.Warn("giving back the limiter's slots failed; they lapse with the lease", "task_id", req.TaskID,
			"outcome", end, "lease", cl.lease.Seconds(), "err", err)
	}
}

// record writes the run's result and ends the job.
func (f *finisher) record(j *job, rec state.TaskRecord, res runner.Result) {
	t := j.task
	if res.Outcome == runner.Cancelled {
		f.msgs.handBack(j, back{why: backCancelled, detail: detailCancelled})
		return
	}
	// The one chokepoint: nothing below stores, logs or sends the output
	// unredacted, and what is kept is cut from redacted text.
	res.Output, res.Truncated = f.redactCut(res, f.catalog[t.Diagnostic])
	rec.Outcome = res.Outcome
	rec.ExitCode = res.ExitCode
	rec.FinishedAt = f.clock.Now()
	// The upload takes the whole output and cuts res to max_output; the
	// record's string copy is made after it, of the cut output only.
	f.hooks.Keep(&rec, &res, f.catalog[t.Diagnostic])
	rec.Output = string(res.Output)
	rec.Truncated = res.Truncated
	f.outcomes.m.Duration.WithLabelValues(t.Diagnostic).Observe(res.Duration.Seconds())
	reason := ""
	if res.Err != nil {
		reason = res.Err.Error()
	}
	f.finish(j, rec, ended{outcome: res.Outcome, reason: reason, result: &res})
	f.msgs.ack(j)
}

// redactCut redacts a run's output (read up to redact.CutSlack past its
// cap) and cuts it to what is kept: the diagnostic's max_output, or
// results.s3.max_size when the uploader takes the whole output.
func (f *finisher) redactCut(res runner.Result, d runner.Diagnostic) ([]byte, bool) {
	limit := int(d.WithDefaults().MaxOutput)
	if f.uploadMax > 0 {
		limit = max(limit, int(f.uploadMax))
	}
	body := res.Output
	if res.Truncated {
		body = bytes.TrimSuffix(body, []byte(runner.TruncationMark))
	}
	out, cut := f.redactor.RedactCut(body, limit)
	if !res.Truncated && !cut {
		return out, false
	}
	return append(out[:len(out):len(out)], runner.TruncationMark...), true
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
		p.log.Warn("poison message suspect: received many times", "task_id", j.task.ID, "receive_count", j.msg.ReceiveCount)
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
			p.log.Warn("state store unavailable; the rejected message is counted without knowing whether it was before",
				"task_id", j.task.ID, "message_id", j.msg.ID, "err", merr)
			first = true
		}
	}
	if first {
		p.outcomes.end(j, ended{outcome: outcome.Rejected, reason: reason, detail: err.Error()})
	} else {
		p.log.Debug("rejected message delivered again; its outcome is already written", "task_id", j.task.ID,
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
		p.log.Warn("dead-letter failed; the message comes back to try again", "task_id", j.task.ID, "message_id", j.msg.ID,
			"retry_after", delay.Seconds(), "err", dlErr)
		p.msgs.handBack(j, back{why: backRetry, after: delay})
	}
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

// finish writes a task's final record and ends j with e. The record, the
// outcome's audit entry, its notification and, for a run whose outcome is
// in report.on, its report job are one store call (one round trip to a
// standalone Redis); a record the store cannot take now is kept in the
// backlog with all of them and written when the store answers again.
func (f *finisher) finish(j *job, rec state.TaskRecord, e ended) {
	entry := f.outcomes.auditEntry(j, e)
	x := state.FinishExtras{ID: state.NewFinishID(), Audit: &entry}
	x.Writes = append(x.Writes, f.hooks.Writes(rec, f.catalog[rec.Diagnostic], e.result)...)
	err := f.calls.storeCall(func(ctx context.Context) error { return f.store.Finish(ctx, rec, x) })
	switch {
	case err == nil:
	case errors.Is(err, state.ErrSuperseded):
		// The lease lapsed while the diagnostic ran and another agent
		// claimed the task: its attempt owns the record, its notification
		// and its report. This run still ends in its own outcome (log,
		// metric, audit).
		f.log.Warn("lease lapsed while running", "task_id", rec.ID, "attempt", rec.Attempts,
			"detail", "a later attempt owns the record; this result is logged only")
	case errors.Is(err, state.ErrPartial):
		f.calls.degraded("audit")
		f.log.Warn("task record written without its audit entry", "task_id", rec.ID, "err", err)
	default:
		f.calls.degraded("finish")
		f.log.Warn("recording the result failed; kept to be written when the state store answers",
			"task_id", rec.ID, "err", err)
		f.backlog.keepRecord(pendingFinish{rec: rec, extras: x})
	}
	f.outcomes.close(j, e)
}

// ack deletes the message of a task that has ended. The task no longer
// needs its worker or its receive slot, so they are freed first: the
// delete is batched and may wait for a DeleteMessageBatch in flight, and a
// worker held through that wait idles for about as long as a no-op
// diagnostic runs. A message whose delete is pending is not hoarded work:
// should the delete fail, its redelivery ends as duplicate.
func (m *messages) ack(j *job) {
	if j.freeSlots != nil {
		j.freeSlots()
	}
	if err := m.queueCall(func(ctx context.Context) error { return m.src.Delete(ctx, j.msg) }); err != nil {
		m.log.Warn("delete failed; a redelivery will end as duplicate", "task_id", j.task.ID, "err", err)
	}
}

// storeCall runs one store call, bounded by redis.timeout.
func (sc *storeCalls) storeCall(call func(context.Context) error) error {
	return callWithin(sc.timeout, call)
}

// queueCall runs one queue call, bounded by QueueCallTimeout.
func (m *messages) queueCall(call func(context.Context) error) error {
	return callWithin(QueueCallTimeout, call)
}

// degraded counts a store operation that could not reach the store.
func (sc *storeCalls) degraded(op string) {
	sc.degradedOps.WithLabelValues(op).Inc()
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

// keepAlive renews the job's lease, and what its run holds in the
// limiter (slots, the breaker probe) with it, while its task runs (until
// ctx, the run's, ends), every third of the visibility timeout, each call
// bounded by redis.timeout; the returned func stops it and waits for it.
// The message's visibility is the queue's Hold, taken when the message was
// accepted. A task run without a lease (redis.state_fail open) renews only
// the limiter's hold.
func (l *leases) keepAlive(ctx context.Context, j *job) func() {
	req := j.limitReq
	if !j.leased && req == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	every := l.lease / 3
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if j.leased {
				l.renewLease(ctx, j, every)
			}
			if req != nil {
				cctx, ccancel := context.WithTimeout(ctx, min(l.storeTimeout, every))
				err := l.limiter.Renew(cctx, *req, l.lease)
				ccancel()
				if err != nil && ctx.Err() == nil {
					l.log.Warn("renewing the limiter's slots failed; they lapse with the lease unless a later renewal lands",
						"task_id", j.task.ID, "err", err)
				}
			}
		}
	})
	return func() { cancel(); wg.Wait() }
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

// deadReason is the dead-letter attribute of a rejected message: the
// reason, then the error, without saying the reason twice when the error
// starts with it (a *task.Error does).
func deadReason(reason string, err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, reason+": ") {
		return msg
	}
	return reason + ": " + err.Error()
}
