package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrFastExit is returned by Run when the root context ended before the
// drain did (a second signal): running work was released, not finished.
var ErrFastExit = errors.New("agent: stopped before the drain completed")

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Deps are the agent's collaborators; Open builds them from a Config.
type Deps struct {
	Source  queue.Source
	Store   state.Store
	Limiter *limiter.Limiter
	// Watcher and Actor are nil when only the signal source is configured.
	Watcher *lifecycle.Watcher
	Actor   *lifecycle.Actor
	// CloudWatch publishes DrainSeconds while draining; nil = off.
	CloudWatch cloudWatchAPI
	// ASGName is the dimension of DrainSeconds.
	ASGName string

	InstanceID string
	Version    string
	Logger     *slog.Logger
	Registry   *prometheus.Registry
	Clock      Clock
	// Runner executes diagnostics; nil = a default Runner.
	Runner *runner.Runner
}

// Agent is one `autodiag run`.
type Agent struct {
	cfg   Config
	d     Deps
	log   *slog.Logger
	m     *metrics
	drain *drain.Controller

	validator *task.Validator
	catalog   map[string]runner.Diagnostic
	runner    *runner.Runner

	// receive bounds received-but-unfinished messages (workers + prefetch);
	// run bounds running diagnostics (workers).
	receive  *semaphore.Weighted
	run      *semaphore.Weighted
	capacity int64

	started time.Time
	// hard is cancelled on fast exit: running work is killed and released.
	hard       context.Context
	cancelHard context.CancelFunc
	// intake is cancelled at the first instant of a drain.
	intake       context.Context
	cancelIntake context.CancelFunc

	mu         sync.Mutex
	trigger    *drainTrigger
	outcomes   map[string]int64
	lastReport time.Time

	inflight   atomic.Int64
	redisState atomic.Bool

	// running holds the task ids executing in this process: the store's
	// lease is per owner, so a duplicate message reaching the agent that
	// already runs the task is caught here.
	runningMu sync.Mutex
	running   map[string]bool
}

type drainTrigger struct {
	drain.Trigger
	action *lifecycle.Action
}

// New assembles an agent from validated config and its dependencies.
func New(cfg Config, d Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Source == nil || d.Store == nil || d.Limiter == nil {
		return nil, errors.New("agent: Source, Store and Limiter are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Clock == nil {
		d.Clock = wallClock{}
	}
	if d.Runner == nil {
		d.Runner = &runner.Runner{}
	}
	a := &Agent{
		cfg:      cfg,
		d:        d,
		log:      d.Logger.With("instance_id", d.InstanceID),
		m:        newMetrics(d.Registry),
		runner:   d.Runner,
		catalog:  map[string]runner.Diagnostic{},
		outcomes: map[string]int64{},
		running:  map[string]bool{},
		started:  d.Clock.Now(),
	}
	a.drain = drain.New(drain.Config{Timeout: cfg.Lifecycle.DrainTimeout, Queued: cfg.Lifecycle.Queued})
	v := &task.Validator{Catalog: map[string]task.Spec{}, MaxAge: cfg.Queue.MaxAge}
	for _, p := range cfg.Limiter.Hosts.Allow {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("agent: limiter.hosts.allow: %w", err)
		}
		v.Allow = append(v.Allow, re)
	}
	for _, diag := range cfg.Diagnostics {
		diag = diag.WithDefaults()
		a.catalog[diag.Name] = diag
		spec := task.Spec{Params: map[string]*regexp.Regexp{}, Required: diag.Placeholders()}
		for name, pat := range diag.Params {
			re, err := task.FullMatch(pat)
			if err != nil {
				return nil, fmt.Errorf("agent: diagnostics %s params.%s: %w", diag.Name, name, err)
			}
			spec.Params[name] = re
		}
		v.Catalog[diag.Name] = spec
	}
	a.validator = v
	workers := int64(cfg.Workers)
	prefetch := max(1, workers/4)
	a.capacity = workers + prefetch
	a.receive = semaphore.NewWeighted(a.capacity)
	a.run = semaphore.NewWeighted(workers)
	a.hard, a.cancelHard = context.WithCancel(context.Background())
	a.intake, a.cancelIntake = context.WithCancel(a.hard)
	a.m.redisUp.Set(1)
	a.redisState.Store(true)
	return a, nil
}

// Registry is where the agent's and its components' metrics live.
func (a *Agent) Registry() *prometheus.Registry { return a.d.Registry }

// Drain starts a drain (admin endpoint, signal). The first trigger wins.
func (a *Agent) Drain(source, reason string) bool {
	return a.startDrain(drain.Trigger{Source: source, Reason: reason}, nil)
}

func (a *Agent) startDrain(tr drain.Trigger, action *lifecycle.Action) bool {
	a.mu.Lock()
	if a.trigger != nil {
		a.mu.Unlock()
		return false
	}
	a.trigger = &drainTrigger{Trigger: tr, action: action}
	a.mu.Unlock()
	// Stop intake synchronously: no receive starts after this line.
	a.cancelIntake()
	if !a.drain.Start(tr) {
		return false
	}
	a.m.drainState.Set(1)
	a.log.Info("drain started", "source", tr.Source, "reason", tr.Reason, "deadline", a.drain.Progress().Deadline)
	return true
}

// Run serves until a drain completes (nil) or ctx ends first (ErrFastExit
// after releasing what was running). Cancel ctx only for a fast exit; a
// graceful stop is Drain.
func (a *Agent) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, a.cancelHard)
	defer stop()
	defer a.cancelHard()

	a.recover(ctx)
	g, gctx := errgroup.WithContext(a.hard)
	done := make(chan struct{})
	// The drain may not end while intake can still hand it work: a poll
	// answered as the drain began delivers messages after Start.
	letGo := a.drain.Hold()
	g.Go(func() error { defer letGo(); return a.intakeLoop() })
	g.Go(func() error { a.instanceLoop(done); return nil })
	if a.d.CloudWatch != nil {
		g.Go(func() error {
			cctx, cancel := context.WithCancel(gctx)
			defer cancel()
			go func() {
				select {
				case <-done:
					cancel()
				case <-cctx.Done():
				}
			}()
			a.publishLimiterDegraded(cctx)
			return nil
		})
	}
	if a.d.Watcher != nil {
		g.Go(func() error {
			wctx, cancel := context.WithCancel(gctx)
			defer cancel()
			go func() {
				select {
				case <-a.drain.Draining():
					cancel()
				case <-wctx.Done():
				}
			}()
			return a.d.Watcher.Run(wctx, func(tr lifecycle.Trigger) {
				a.startDrain(drain.Trigger{Source: tr.Source, Reason: tr.Reason, Deadline: tr.Deadline}, tr.Action)
			})
		})
	}
	var runErr error
	g.Go(func() error {
		defer close(done)
		runErr = a.supervise(ctx)
		return nil
	})
	err := g.Wait()
	if runErr != nil {
		return runErr
	}
	return err
}

// sourceRestart is the trigger source of a drain resumed after a restart.
const sourceRestart = "restart"

// recover marks tasks this instance left running in a previous life as
// interrupted, and resumes a drain that was persisted mid-way.
func (a *Agent) recover(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if recs, err := a.d.Store.Recover(rctx, a.d.InstanceID); err != nil {
		a.log.Warn("recover in-flight tasks", "err", err)
	} else {
		for _, r := range recs {
			a.log.Warn("task interrupted by a previous run; SQS will redeliver it", "task_id", r.ID, "host", r.Host, "diagnostic", r.Diagnostic, "attempts", r.Attempts)
			a.audit(state.AuditEntry{TaskID: r.ID, Host: r.Host, Diagnostic: r.Diagnostic, Outcome: "interrupted"})
		}
	}
	rec, err := a.d.Store.LoadDrain(rctx, a.d.InstanceID)
	if err != nil {
		a.log.Warn("load persisted drain", "err", err)
		return
	}
	if rec == nil || rec.Completed {
		return
	}
	var action *lifecycle.Action
	if len(rec.Action) > 0 {
		action = new(lifecycle.Action)
		if err := json.Unmarshal(rec.Action, action); err != nil {
			a.log.Warn("persisted lifecycle action unreadable", "err", err)
			action = nil
		}
	}
	a.log.Info("resuming a drain persisted before a restart", "source", rec.Source, "deadline", rec.Deadline)
	a.startDrain(drain.Trigger{Source: sourceRestart, Reason: "resumed: " + rec.Reason, Deadline: rec.Deadline}, action)
}

// intakeLoop receives while running: only as many messages as there are
// free slots (workers plus a small prefetch).
func (a *Agent) intakeLoop() error {
	ctx := a.intake
	for {
		if err := a.receive.Acquire(ctx, 1); err != nil {
			return nil // draining or fast exit
		}
		n := int64(1)
		for n < int64(a.cfg.Queue.BatchSize) && a.receive.TryAcquire(1) {
			n++
		}
		msgs, err := a.d.Source.Receive(ctx, int(n))
		if extra := n - int64(len(msgs)); extra > 0 {
			a.receive.Release(extra)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, queue.ErrClosed) {
				return nil
			}
			a.log.Warn("receive failed", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		for _, m := range msgs {
			a.accept(m)
		}
	}
}

// job is one received message on its way to an outcome.
type job struct {
	msg  *queue.Message
	item *drain.Item

	mu       sync.Mutex
	task     task.Task
	valid    bool
	received time.Time
	ran      time.Duration
	ended    bool

	// freeSlots gives back the job's receive slot and, once it has one,
	// its worker slot; ack calls it before waiting for the delete, and
	// handle on its way out. Used by the handle goroutine only.
	freeSlots func()
}

func (a *Agent) accept(m *queue.Message) {
	a.m.received.Inc()
	a.m.inflight.Set(float64(a.inflight.Add(1)))
	j := &job{msg: m, received: a.d.Clock.Now()}
	j.item = a.drain.Track(func() { a.releaseUnstarted(j) })
	go a.handle(j)
}

// handle takes one message to its outcome.
func (a *Agent) handle(j *job) {
	// A drain waits for the item, so for the delete too; the slots are
	// freed earlier (see ack).
	defer j.item.Done()
	haveRun := false
	j.freeSlots = sync.OnceFunc(func() {
		if haveRun {
			a.run.Release(1)
		}
		a.receive.Release(1)
	})
	defer func() { j.freeSlots() }()
	m := j.msg
	t, err := task.Decode(m.Body)
	if err == nil && t.ID == "" {
		t.ID = m.ID
	}
	if err == nil {
		err = a.validator.Validate(&t, a.d.Clock.Now())
	}
	j.mu.Lock()
	j.task = t
	if t.ID == "" {
		j.task.ID = m.ID
	}
	j.valid = err == nil
	j.mu.Unlock()
	if err != nil {
		a.reject(j, err)
		return
	}

	if err := a.run.Acquire(a.hard, 1); err != nil {
		a.releaseUnstarted(j)
		return
	}
	haveRun = true
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(a.hard))
	defer cancelRun()
	stop := context.AfterFunc(a.hard, cancelRun)
	defer stop()
	if !j.item.Start(cancelRun) {
		return // the drain released it
	}
	a.execute(runCtx, j)
}

// reject ends an invalid or stale message.
func (a *Agent) reject(j *job, err error) {
	reason := task.Reason(err)
	ctx, cancel := a.callCtx()
	defer cancel()
	if reason == task.ReasonStale {
		a.end(j, OutcomeStale, reason, err.Error(), nil)
		a.ack(ctx, j)
		return
	}
	if j.msg.ReceiveCount >= 5 {
		a.log.Warn("poison message suspect: received many times", "task_id", j.task.ID, "receive_count", j.msg.ReceiveCount)
	}
	a.end(j, OutcomeRejected, reason, err.Error(), nil)
	switch dlErr := a.d.Source.DeadLetter(ctx, j.msg, reason+": "+err.Error()); {
	case dlErr == nil:
	case errors.Is(dlErr, queue.ErrNoDeadLetter):
		// Left to the queue's redrive policy.
	default:
		a.log.Warn("dead-letter failed; the message will be redelivered", "task_id", j.task.ID, "err", dlErr)
	}
}

// releaseUnstarted hands an unstarted message back (drain policy/deadline).
func (a *Agent) releaseUnstarted(j *job) {
	ctx, cancel := a.callCtx()
	defer cancel()
	if err := a.d.Source.ChangeVisibility(ctx, j.msg, 0); err != nil {
		a.log.Warn("release to queue failed", "task_id", j.msg.ID, "err", err)
	}
	a.end(j, OutcomeReleased, "drain", "handed back to the queue unstarted", nil)
}

// callCtx bounds a queue or store call that must happen even mid-shutdown.
func (a *Agent) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(a.hard), 30*time.Second)
}

// ack deletes the message of a task that has ended. The task no longer
// needs its worker or its receive slot, so they are freed first: the
// delete is batched and may wait for a DeleteMessageBatch in flight, and a
// worker held through that wait idled for about as long as a no-op
// diagnostic runs. A message whose delete is pending is not hoarded work:
// should the delete fail, its redelivery ends as duplicate.
func (a *Agent) ack(ctx context.Context, j *job) {
	if j.freeSlots != nil {
		j.freeSlots()
	}
	if err := a.d.Source.Delete(ctx, j.msg); err != nil {
		a.log.Warn("delete failed; a redelivery will end as duplicate", "task_id", j.task.ID, "err", err)
	}
}

// execute claims, asks the limiter, runs and records one valid task.
func (a *Agent) execute(ctx context.Context, j *job) {
	t := j.task
	lease := a.cfg.Queue.VisibilityTimeout
	cctx, cancel := a.callCtx()
	defer cancel()
	if !a.markRunning(t.ID) {
		hide := lease + 5*time.Second
		_ = a.d.Source.ChangeVisibility(cctx, j.msg, hide)
		a.log.Info("duplicate delivery of a task running here; looking again later", "task_id", t.ID, "retry_in", hide)
		a.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: "running_here"})
		a.finishJob(j)
		return
	}
	defer a.unmarkRunning(t.ID)
	claim, err := a.d.Store.Claim(cctx, state.TaskRecord{ID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic}, a.d.InstanceID, lease)
	a.noteStore(err)
	if err != nil {
		// Without the lease exactly-once cannot be guaranteed: hand the
		// message back for a later attempt.
		a.log.Warn("state store unavailable; task handed back", "task_id", t.ID, "err", err)
		_ = a.d.Source.ChangeVisibility(cctx, j.msg, 10*time.Second)
		a.end(j, OutcomeReleased, "state_unavailable", err.Error(), nil)
		return
	}
	switch claim.Result {
	case state.AlreadyDone:
		a.end(j, OutcomeDuplicate, "already_done", "ended earlier as "+claim.Record.Outcome, nil)
		a.ack(cctx, j)
		return
	case state.HeldElsewhere:
		hide := claim.LeaseRemaining + 5*time.Second
		_ = a.d.Source.ChangeVisibility(cctx, j.msg, hide)
		a.log.Info("task running on another agent; looking again later", "task_id", t.ID, "owner", claim.Record.Owner, "retry_in", hide)
		a.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: "running_elsewhere"})
		a.finishJob(j)
		return
	}
	rec := claim.Record

	req := limiter.Request{Host: t.Host, Diagnostic: t.Diagnostic, Severity: t.Severity}
	if key := a.cfg.Limiter.Dedupe.Key; key != "" {
		req.DedupeKey, _ = t.Field(key)
	}
	dec, err := a.d.Limiter.Allow(cctx, req)
	if err != nil {
		_ = a.d.Store.Release(cctx, t.ID, a.d.InstanceID)
		_ = a.d.Source.ChangeVisibility(cctx, j.msg, 0)
		a.end(j, OutcomeReleased, "limiter_cancelled", err.Error(), nil)
		return
	}
	if dec.Duplicate {
		rec.Outcome, rec.Reason = OutcomeDuplicate, dec.Reason
		a.noteStore(a.d.Store.Finish(cctx, rec))
		a.end(j, OutcomeDuplicate, dec.Reason, "same alert event within the dedupe ttl", &dec)
		a.ack(cctx, j)
		return
	}
	if !dec.Allowed {
		if dec.OnExceed == "defer" {
			delay := min(max(dec.RetryAfter, time.Second), 12*time.Hour)
			a.noteStore(a.d.Store.Release(cctx, t.ID, a.d.InstanceID))
			if err := a.d.Source.ChangeVisibility(cctx, j.msg, delay); err != nil {
				a.log.Warn("defer failed", "task_id", t.ID, "err", err)
			}
			a.log.Info("task deferred by the limiter", "task_id", t.ID, "host", t.Host, "rule", dec.Rule, "limit", dec.Limit, "retry_after", delay)
			a.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: dec.Reason,
				Fields: map[string]string{"rule": dec.Rule, "limit": dec.Limit, "retry_after": delay.String()}})
			a.finishJob(j)
			return
		}
		rec.Outcome, rec.Reason = OutcomeRateLimited, dec.Reason
		a.noteStore(a.d.Store.Finish(cctx, rec))
		a.end(j, OutcomeRateLimited, dec.Reason, "denied by rule "+dec.Rule, &dec)
		a.ack(cctx, j)
		return
	}

	diag := a.catalog[t.Diagnostic]
	argv := diag.Args(t.Host, t.ID, t.Params)
	keep := a.keepAlive(j, lease)
	res := a.runner.Run(ctx, diag, argv)
	keep()

	if res.Outcome == runner.Cancelled {
		a.noteStore(a.d.Store.Release(cctx, t.ID, a.d.InstanceID))
		if err := a.d.Source.ChangeVisibility(cctx, j.msg, 0); err != nil {
			a.log.Warn("release to queue failed", "task_id", t.ID, "err", err)
		}
		a.end(j, OutcomeReleased, "cancelled", "running task cancelled by the drain deadline or a fast exit", nil)
		return
	}
	rec.Outcome = res.Outcome
	rec.ExitCode = res.ExitCode
	rec.Output = string(res.Output)
	rec.Truncated = res.Truncated
	rec.FinishedAt = a.d.Clock.Now()
	switch err := a.d.Store.Finish(cctx, rec); {
	case errors.Is(err, state.ErrSuperseded):
		// Our lease lapsed while the diagnostic ran and another agent
		// claimed the task: its attempt owns the record. This run still
		// ends in its own outcome below (log, metric, audit).
		a.log.Warn("lease lapsed while running; a later attempt owns the record, this result is logged only",
			"task_id", t.ID, "attempt", rec.Attempts)
	case err != nil:
		a.noteStore(err)
		a.log.Error("recording the result failed; a redelivery may run the task again", "task_id", t.ID, "err", err)
	}
	a.m.duration.WithLabelValues(t.Diagnostic).Observe(res.Duration.Seconds())
	reason := ""
	if res.Err != nil {
		reason = res.Err.Error()
	}
	a.endRun(j, res, reason)
	a.ack(cctx, j)
}

func (a *Agent) markRunning(id string) bool {
	a.runningMu.Lock()
	defer a.runningMu.Unlock()
	if a.running[id] {
		return false
	}
	a.running[id] = true
	return true
}

func (a *Agent) unmarkRunning(id string) {
	a.runningMu.Lock()
	defer a.runningMu.Unlock()
	delete(a.running, id)
}

// keepAlive extends the message's visibility and the lease while a task
// runs, every third of the visibility timeout; the returned func stops it.
// The two run as separate loops, each call bounded by a third of the
// timeout: the lease is what keeps a redelivered message from running
// elsewhere, so a slow or failing SQS call must not delay or cancel its
// renewal (they once shared one context, and a ChangeMessageVisibility
// answered late let the lease lapse and another agent run the task again).
func (a *Agent) keepAlive(j *job, lease time.Duration) func() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(a.hard))
	var wg sync.WaitGroup
	every := func(call func(context.Context) error, onErr func(error)) {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, lease/3)
			if err := call(cctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
			ccancel()
		}
	}
	wg.Go(func() {
		every(func(c context.Context) error { return a.d.Store.Renew(c, j.task.ID, a.d.InstanceID, lease) },
			func(err error) {
				a.noteStore(err)
				a.log.Warn("renewing the execution lease failed", "task_id", j.task.ID, "err", err)
			})
	})
	wg.Go(func() {
		every(func(c context.Context) error { return a.d.Source.ChangeVisibility(c, j.msg, lease) },
			func(err error) { a.log.Warn("extending visibility failed", "task_id", j.task.ID, "err", err) })
	})
	return func() { cancel(); wg.Wait() }
}

func (a *Agent) noteStore(err error) {
	if err == nil || errors.Is(err, state.ErrLeaseLost) || errors.Is(err, state.ErrSuperseded) {
		return
	}
	a.log.Warn("state store error", "err", err)
}

// finishJob drops a job that did not end (deferred, running elsewhere).
func (a *Agent) finishJob(j *job) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.ended {
		j.ended = true
		a.m.inflight.Set(float64(a.inflight.Add(-1)))
	}
}

func (a *Agent) endRun(j *job, res runner.Result, reason string) {
	j.mu.Lock()
	j.ran = res.Duration
	j.mu.Unlock()
	a.endWith(j, res.Outcome, reason, "", nil, []any{"exit_code", res.ExitCode, "truncated", res.Truncated})
}

// ranFor is how long the diagnostic ran, when it did.
func (j *job) ranFor() (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ran, j.ran > 0
}

func (a *Agent) end(j *job, outcome, reason, detail string, dec *limiter.Decision) {
	a.endWith(j, outcome, reason, detail, dec, nil)
}

// endWith records a task's one outcome: a log line, a metric, an audit
// entry and the status counters. A job ends once; later calls are ignored.
func (a *Agent) endWith(j *job, outcome, reason, detail string, dec *limiter.Decision, extra []any) {
	j.mu.Lock()
	if j.ended {
		j.mu.Unlock()
		return
	}
	j.ended = true
	t := j.task
	j.mu.Unlock()
	a.m.inflight.Set(float64(a.inflight.Add(-1)))

	// Only catalog names become label values: a rejected task's diagnostic
	// is caller-chosen and would grow the series without bound.
	diagLabel := t.Diagnostic
	if _, known := a.catalog[diagLabel]; !known {
		diagLabel = "unknown"
	}
	a.m.outcomes.WithLabelValues(diagLabel, outcome).Inc()
	a.mu.Lock()
	a.outcomes[outcome]++
	a.mu.Unlock()

	took := a.d.Clock.Now().Sub(j.received)
	if ran, ok := j.ranFor(); ok {
		took = ran
	}
	attrs := []any{"task_id", t.ID, "host", t.Host, "diagnostic", t.Diagnostic, "outcome", outcome, "reason", reason,
		"duration", took.Seconds()}
	fields := map[string]string{}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	if dec != nil {
		attrs = append(attrs, "rule", dec.Rule, "limit", dec.Limit, "retry_after", dec.RetryAfter, "degraded", dec.Degraded,
			"daily_used", dec.Counters.DailyUsed, "window_count", dec.Counters.WindowCount)
		fields["rule"], fields["limit"], fields["retry_after"] = dec.Rule, dec.Limit, dec.RetryAfter.String()
	}
	attrs = append(attrs, extra...)
	level := slog.LevelInfo
	if outcome == OutcomeFailed || outcome == OutcomeTimedOut || outcome == OutcomeRejected {
		level = slog.LevelWarn
	}
	a.log.Log(context.Background(), level, "task ended", attrs...)
	if len(fields) == 0 {
		fields = nil
	}
	a.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: outcome, Reason: reason, Fields: fields})
}

func (a *Agent) audit(e state.AuditEntry) {
	e.InstanceID = a.d.InstanceID
	if e.Time.IsZero() {
		e.Time = a.d.Clock.Now()
	}
	ctx, cancel := a.callCtx()
	defer cancel()
	if err := a.d.Store.Audit(ctx, e); err != nil {
		a.noteStore(err)
	}
}

// instanceLoop keeps this instance's record fresh until done.
func (a *Agent) instanceLoop(done <-chan struct{}) {
	const every = 10 * time.Second
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.putInstance(3 * every)
		select {
		case <-done:
			a.putInstance(3 * every)
			return
		case <-t.C:
		}
	}
}

func (a *Agent) putInstance(ttl time.Duration) {
	ctx, cancel := a.callCtx()
	defer cancel()
	err := a.d.Store.PutInstance(ctx, state.Instance{ID: a.d.InstanceID, State: a.drain.State().String(),
		StartedAt: a.started, Version: a.d.Version, Inflight: int(a.inflight.Load())}, ttl)
	if err == nil {
		err = a.d.Store.Ping(ctx)
	}
	up := err == nil
	a.redisState.Store(up)
	if up {
		a.m.redisUp.Set(1)
	} else {
		a.m.redisUp.Set(0)
		a.log.Warn("state store unreachable", "err", err)
	}
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
