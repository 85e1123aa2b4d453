package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/limiter"
)

// Runner executes one diagnostic's argv; *runner.Runner is the real one.
type Runner interface {
	Run(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result
}

var _ Runner = (*runner.Runner)(nil)

// decider is the part of the limiter the pipeline asks.
type decider interface {
	Allow(ctx context.Context, r limiter.Request) (limiter.Decision, error)
}

// Bounds of the pipeline's calls. Each call gets a context of its own,
// created right before it, so that a diagnostic running for minutes never
// leaves the bookkeeping after it with an expired context. Store calls are
// bounded by redis.timeout (pipeline.storeTimeout).
const (
	// queueCallTimeout bounds one queue call (delete, visibility,
	// dead-letter); the SQS client retries within it.
	queueCallTimeout = 30 * time.Second
	// decideTimeout bounds one limiter decision; the limiter bounds its
	// own Redis round trip by redis.timeout and applies the fail mode.
	decideTimeout = 30 * time.Second
	// lookAgainMargin is added to a deferral that waits for a lease held
	// elsewhere, so the message comes back after the lease has ended.
	lookAgainMargin = 5 * time.Second
	// stateRetryDelay hides a message whose claim failed for a later try.
	stateRetryDelay = 10 * time.Second
	// maxDefer is SQS's longest visibility timeout.
	maxDefer = 12 * time.Hour
)

// pipeline takes each received message to its outcome: validate, claim the
// task's lease, ask the limiter, run the diagnostic and record the result.
// Each step is one method; every end goes through the outcome recorder.
type pipeline struct {
	src          queue.Source
	store        state.TaskStore
	limiter      decider
	runner       Runner
	validator    *task.Validator
	catalog      map[string]runner.Diagnostic
	outcomes     *outcomeRecorder
	drain        *drain.Controller
	clock        Clock
	log          *slog.Logger
	instanceID   string
	lease        time.Duration // queue.visibility_timeout
	dedupeKey    string        // limiter.dedupe.key
	storeTimeout time.Duration // redis.timeout

	// receive bounds received-but-unfinished messages (workers +
	// prefetch); run bounds running diagnostics (workers).
	receive *semaphore.Weighted
	run     *semaphore.Weighted
	// hard ends on a fast exit: running work is killed and released.
	hard context.Context

	handlers sync.WaitGroup

	// running holds the task ids executing in this process: the store's
	// lease is per owner, so a duplicate message reaching the agent that
	// already runs the task is caught here.
	runningMu sync.Mutex
	running   map[string]bool
}

// accept tracks a received message and starts its handler.
func (p *pipeline) accept(m *queue.Message) {
	p.outcomes.received()
	j := &job{msg: m, received: p.clock.Now()}
	j.item = p.drain.Track(func() { p.releaseUnstarted(j) })
	p.handlers.Go(func() { p.handle(j) })
}

// wait returns once every handler has.
func (p *pipeline) wait() { p.handlers.Wait() }

// handle takes one message to its outcome.
func (p *pipeline) handle(j *job) {
	// A drain waits for the item, so for the delete too; the slots are
	// freed earlier (see ack).
	defer j.item.Done()
	haveRun := false
	j.freeSlots = sync.OnceFunc(func() {
		if haveRun {
			p.run.Release(1)
		}
		p.receive.Release(1)
	})
	defer func() { j.freeSlots() }()

	if err := p.validate(j); err != nil {
		p.reject(j, err)
		return
	}
	if err := p.run.Acquire(p.hard, 1); err != nil {
		p.releaseUnstarted(j)
		return
	}
	haveRun = true
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(p.hard))
	defer cancelRun()
	stop := context.AfterFunc(p.hard, cancelRun)
	defer stop()
	if !j.item.Start(cancelRun) {
		return // the drain released it
	}
	p.execute(runCtx, j)
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

// execute is claim → decide → run → record for one valid task.
func (p *pipeline) execute(ctx context.Context, j *job) {
	t := j.task
	if !p.markRunning(t.ID) {
		p.lookAgain(j, p.lease+lookAgainMargin, "running_here", nil,
			"detail", "a duplicate delivery of a task running here")
		return
	}
	defer p.unmarkRunning(t.ID)
	rec, ok := p.claim(j)
	if !ok {
		return
	}
	if !p.decide(j, rec) {
		return
	}
	res := p.runTask(ctx, j)
	p.record(j, rec, res)
}

// claim takes the task's execution lease; false when the job ended or was
// put back instead.
func (p *pipeline) claim(j *job) (state.TaskRecord, bool) {
	t := j.task
	var c state.Claim
	err := p.storeCall(func(ctx context.Context) (err error) {
		c, err = p.store.Claim(ctx, state.TaskRecord{ID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic}, p.instanceID, p.lease)
		return err
	})
	if err != nil {
		// Without the lease exactly-once cannot be guaranteed: hand the
		// message back for a later attempt.
		p.log.Warn("state store unavailable; task handed back", "task_id", t.ID, "err", err)
		p.changeVisibility(j, stateRetryDelay)
		p.outcomes.end(j, ended{outcome: OutcomeReleased, reason: "state_unavailable", detail: err.Error()})
		return state.TaskRecord{}, false
	}
	switch c.Result {
	case state.AlreadyDone:
		p.outcomes.end(j, ended{outcome: OutcomeDuplicate, reason: "already_done", detail: "ended earlier as " + c.Record.Outcome})
		p.ack(j)
		return state.TaskRecord{}, false
	case state.HeldElsewhere:
		p.lookAgain(j, c.LeaseRemaining+lookAgainMargin, "running_elsewhere", nil,
			"detail", "running on another agent", "owner", c.Record.Owner)
		return state.TaskRecord{}, false
	}
	return c.Record, true
}

// decide asks the limiter; false when the task must not run now (the job
// ended, or was deferred).
func (p *pipeline) decide(j *job, rec state.TaskRecord) bool {
	t := j.task
	req := limiter.Request{Host: t.Host, Diagnostic: t.Diagnostic, Severity: t.Severity}
	if p.dedupeKey != "" {
		req.DedupeKey, _ = t.Field(p.dedupeKey)
	}
	var dec limiter.Decision
	err := callWithin(decideTimeout, func(ctx context.Context) (err error) {
		dec, err = p.limiter.Allow(ctx, req)
		return err
	})
	switch {
	case err != nil:
		p.release(j)
		p.outcomes.end(j, ended{outcome: OutcomeReleased, reason: "limiter_cancelled", detail: err.Error()})
		return false
	case dec.Duplicate:
		rec.Outcome, rec.Reason = OutcomeDuplicate, dec.Reason
		p.finish(rec)
		p.outcomes.end(j, ended{outcome: OutcomeDuplicate, reason: dec.Reason, detail: "same alert event within the dedupe ttl", decision: &dec})
		p.ack(j)
		return false
	case dec.Allowed:
		return true
	case dec.OnExceed == "defer":
		p.releaseLease(t.ID)
		delay := min(max(dec.RetryAfter, time.Second), maxDefer)
		p.lookAgain(j, delay, dec.Reason, map[string]string{"rule": dec.Rule, "limit": dec.Limit, "retry_after": delay.String()},
			"detail", "limited by rule "+dec.Rule, "host", t.Host, "rule", dec.Rule, "limit", dec.Limit)
		return false
	default:
		rec.Outcome, rec.Reason = OutcomeRateLimited, dec.Reason
		p.finish(rec)
		p.outcomes.end(j, ended{outcome: OutcomeRateLimited, reason: dec.Reason, detail: "denied by rule " + dec.Rule, decision: &dec})
		p.ack(j)
		return false
	}
}

// runTask runs the diagnostic while keeping the message and the lease alive.
func (p *pipeline) runTask(ctx context.Context, j *job) runner.Result {
	t := j.task
	diag := p.catalog[t.Diagnostic]
	keep := p.keepAlive(j)
	defer keep()
	return p.runner.Run(ctx, diag, diag.Args(t.Host, t.ID, t.Params))
}

// record writes the run's result and ends the job.
func (p *pipeline) record(j *job, rec state.TaskRecord, res runner.Result) {
	t := j.task
	if res.Outcome == runner.Cancelled {
		p.release(j)
		p.outcomes.end(j, ended{outcome: OutcomeReleased, reason: "cancelled", detail: "running task cancelled by the drain deadline or a fast exit"})
		return
	}
	rec.Outcome = res.Outcome
	rec.ExitCode = res.ExitCode
	rec.Output = string(res.Output)
	rec.Truncated = res.Truncated
	rec.FinishedAt = p.clock.Now()
	switch err := p.storeCall(func(ctx context.Context) error { return p.store.Finish(ctx, rec) }); {
	case errors.Is(err, state.ErrSuperseded):
		// The lease lapsed while the diagnostic ran and another agent
		// claimed the task: its attempt owns the record. This run still
		// ends in its own outcome below (log, metric, audit).
		p.log.Warn("lease lapsed while running", "task_id", t.ID, "attempt", rec.Attempts,
			"detail", "a later attempt owns the record; this result is logged only")
	case err != nil:
		p.log.Error("recording the result failed; a redelivery may run the task again", "task_id", t.ID, "err", err)
	}
	p.outcomes.m.duration.WithLabelValues(t.Diagnostic).Observe(res.Duration.Seconds())
	reason := ""
	if res.Err != nil {
		reason = res.Err.Error()
	}
	p.outcomes.end(j, ended{outcome: res.Outcome, reason: reason, result: &res})
	p.ack(j)
}

// reject ends an invalid or stale message.
func (p *pipeline) reject(j *job, err error) {
	reason := task.Reason(err)
	if reason == task.ReasonStale {
		p.outcomes.end(j, ended{outcome: OutcomeStale, reason: reason, detail: err.Error()})
		p.ack(j)
		return
	}
	if j.msg.ReceiveCount >= 5 {
		p.log.Warn("poison message suspect: received many times", "task_id", j.task.ID, "receive_count", j.msg.ReceiveCount)
	}
	p.outcomes.end(j, ended{outcome: OutcomeRejected, reason: reason, detail: err.Error()})
	switch dlErr := p.queueCall(func(ctx context.Context) error {
		return p.src.DeadLetter(ctx, j.msg, reason+": "+err.Error())
	}); {
	case dlErr == nil:
	case errors.Is(dlErr, queue.ErrNoDeadLetter):
		// Left to the queue's redrive policy.
	default:
		p.log.Warn("dead-letter failed; the message will be redelivered", "task_id", j.task.ID, "err", dlErr)
	}
}

// releaseUnstarted hands an unstarted message back (drain policy or
// deadline, fast exit).
func (p *pipeline) releaseUnstarted(j *job) {
	j.release.Do(func() {
		p.changeVisibility(j, 0)
		p.outcomes.end(j, ended{outcome: OutcomeReleased, reason: "drain", detail: "handed back to the queue unstarted"})
	})
}

// lookAgain hides the message for hide and lets the job go without an
// outcome: the task is not done, and ends when the message comes back.
// Its log line is "task deferred" with the reason; attrs add detail.
func (p *pipeline) lookAgain(j *job, hide time.Duration, reason string, fields map[string]string, attrs ...any) {
	t := j.task
	p.changeVisibility(j, hide)
	p.log.Info("task deferred", append([]any{"task_id", t.ID, "reason", reason, "retry_after", hide.Seconds()}, attrs...)...)
	p.outcomes.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: reason, Fields: fields})
	p.outcomes.drop(j)
}

// release gives the lease and the message back without ending the task.
func (p *pipeline) release(j *job) {
	p.releaseLease(j.task.ID)
	p.changeVisibility(j, 0)
}

func (p *pipeline) releaseLease(taskID string) {
	logStoreErr(p.log, p.storeCall(func(ctx context.Context) error { return p.store.Release(ctx, taskID, p.instanceID) }))
}

func (p *pipeline) finish(rec state.TaskRecord) {
	logStoreErr(p.log, p.storeCall(func(ctx context.Context) error { return p.store.Finish(ctx, rec) }))
}

func (p *pipeline) changeVisibility(j *job, d time.Duration) {
	if err := p.queueCall(func(ctx context.Context) error { return p.src.ChangeVisibility(ctx, j.msg, d) }); err != nil {
		p.log.Warn("changing the message's visibility failed", "task_id", j.task.ID, "visibility", d.Seconds(), "err", err)
	}
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
		p.log.Warn("delete failed; a redelivery will end as duplicate", "task_id", j.task.ID, "err", err)
	}
}

// storeCall runs one store call, bounded by redis.timeout.
func (p *pipeline) storeCall(call func(context.Context) error) error {
	return callWithin(p.storeTimeout, call)
}

// queueCall runs one queue call, bounded by queueCallTimeout.
func (p *pipeline) queueCall(call func(context.Context) error) error {
	return callWithin(queueCallTimeout, call)
}

func (p *pipeline) markRunning(id string) bool {
	p.runningMu.Lock()
	defer p.runningMu.Unlock()
	if p.running[id] {
		return false
	}
	p.running[id] = true
	return true
}

func (p *pipeline) unmarkRunning(id string) {
	p.runningMu.Lock()
	defer p.runningMu.Unlock()
	delete(p.running, id)
}

// keepAlive extends the message's visibility and the lease while a task
// runs, every third of the visibility timeout; the returned func stops it
// and waits for it. The two run as separate loops, each call bounded by a
// third of the timeout at most: the lease is what keeps a redelivered
// message from running elsewhere, so a slow or failing SQS call must not
// delay or cancel its renewal.
func (p *pipeline) keepAlive(j *job) func() {
	ctx, cancel := context.WithCancel(context.Background())
	every := p.lease / 3
	var wg sync.WaitGroup
	loop := func(bound time.Duration, call func(context.Context) error, onErr func(error)) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, min(bound, every))
			if err := call(cctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
			ccancel()
		}
	}
	wg.Go(func() {
		loop(p.storeTimeout, func(c context.Context) error { return p.store.Renew(c, j.task.ID, p.instanceID, p.lease) },
			func(err error) {
				logStoreErr(p.log, err)
				p.log.Warn("renewing the execution lease failed", "task_id", j.task.ID, "err", err)
			})
	})
	wg.Go(func() {
		loop(queueCallTimeout, func(c context.Context) error { return p.src.ChangeVisibility(c, j.msg, p.lease) },
			func(err error) { p.log.Warn("extending visibility failed", "task_id", j.task.ID, "err", err) })
	})
	return func() { cancel(); wg.Wait() }
}

// logStoreErr logs a state store error; a lost or superseded lease is an
// answer, not an error.
func logStoreErr(log *slog.Logger, err error) {
	if err == nil || errors.Is(err, state.ErrLeaseLost) || errors.Is(err, state.ErrSuperseded) {
		return
	}
	log.Warn("state store error", "err", err)
}
