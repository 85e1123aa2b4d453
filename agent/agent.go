package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/notify"
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

// ErrCompletionFailed is returned by Run when the drain ended but
// CompleteLifecycleAction did not succeed within its retries: the hook
// times out with its default result unless a restarted agent, which
// resumes the persisted drain, completes it first.
var ErrCompletionFailed = errors.New("agent: lifecycle action not completed")

// Ending says how a drain that finished ended, so the process can tell
// its supervisor whether to start it again.
type Ending int

const (
	// EndingNone: Run has not finished a drain.
	EndingNone Ending = iota
	// EndingDone: the drain ended a lifecycle action (completed, or Auto
	// Scaling answered that none was active), or its trigger was a spot
	// interruption, a rebalance recommendation, a scheduled maintenance
	// event or SIGTERM/SIGINT: the instance or the service is going away,
	// and the agent is not to be restarted (it would find the standing
	// notice and drain again).
	EndingDone
	// EndingDrained: drained for another reason (POST /v1/drain, a
	// persisted drain resumed without an action, the instance going back to
	// its warm pool): the instance stays, and so must an agent.
	EndingDrained
)

func (e Ending) String() string {
	switch e {
	case EndingDone:
		return "done"
	case EndingDrained:
		return "drained"
	}
	return "none"
}

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Deps are the agent's collaborators; Open builds them from a Config.
type Deps struct {
	Source  queue.Source
	Store   state.Store
	Limiter *limiter.Limiter
	// Watcher is nil when only the signal source is configured; Actor
	// too, unless lifecycle.launch_hook_name is set.
	Watcher *lifecycle.Watcher
	Actor   *lifecycle.Actor
	// CloudWatch publishes DrainSeconds and LimiterDegraded; nil = off.
	CloudWatch cloudWatchAPI
	// S3 takes the full outputs of results.s3 (NewS3Client); needed when
	// results.s3.bucket is set.
	S3 s3API
	// ASGName is the dimension of the CloudWatch metrics, and with AZ
	// places the instance in its record (limiter max_percent scopes).
	ASGName string
	AZ      string
	// ResolveASG learns the instance's group for the CloudWatch metrics
	// when ASGName is empty (DescribeAutoScalingInstances); nil = through
	// Actor, or not at all without one.
	ResolveASG func(ctx context.Context) (string, error)

	InstanceID string
	Version    string
	Logger     *slog.Logger
	Registry   *prometheus.Registry
	Clock      Clock
	// Runner executes diagnostics; nil = a default *runner.Runner.
	Runner Runner
	// AlertSender puts the tasks alerts become onto the task queue; nil =
	// one Source.Send per task.
	AlertSender alert.Sender
	// Outbox holds notifications until a sink took them; nil = in memory.
	Outbox notify.Outbox
	// LookupEnv reads the sinks' url_env and secret_env; nil = an empty
	// environment.
	LookupEnv func(string) (string, bool)
	// Reports are the report provider, queue and limiter backend; needed
	// with report.enabled (OpenReportParts).
	Reports *ReportParts
}

// Agent is one `autodiag run`: it wires intake, the job pipeline, the
// outcome recorder, the drain supervisor, the instance record and the
// CloudWatch publisher, and runs them until a drain completes.
type Agent struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics

	drain     *drain.Controller
	validator *task.Validator
	intake    *intake
	pipeline  *pipeline
	outcomes  *outcomeRecorder
	sup       *supervisor
	presence  *presence
	publisher *publisher // nil = CloudWatch off
	alerts    *alertRouting
	notifier  *notifier // nil = no sinks
	reports   *reports  // nil = reports off

	// hard ends on a fast exit; intakeCtx at the first instant of a drain.
	hard       context.Context
	cancelHard context.CancelFunc
	intakeCtx  context.Context

	startOnce sync.Once
	started   chan struct{} // closed once Run serves; see Started
	ending    atomic.Int32  // an Ending, set when Run returns
	launch    atomic.Int32  // launchStarting, launchOpen or launchAbandoned (launch.go)
	watching  atomic.Bool   // the lifecycle watcher runs
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
	validator, catalog, err := compileCatalog(cfg)
	if err != nil {
		return nil, err
	}
	log := d.Logger.With("instance_id", d.InstanceID)
	diagnostics := make([]string, 0, len(cfg.Diagnostics))
	for _, diag := range cfg.Diagnostics {
		diagnostics = append(diagnostics, diag.Name)
	}
	a := &Agent{cfg: cfg, d: d, log: log, m: newMetrics(d.Registry, diagnostics), validator: validator}
	if a.alerts, err = newAlertRouting(cfg, validator, d); err != nil {
		return nil, err
	}
	a.drain = drain.New(cfg.Drain)
	a.hard, a.cancelHard = context.WithCancel(context.Background())
	var stopIntake context.CancelFunc
	a.intakeCtx, stopIntake = context.WithCancel(a.hard)

	a.outcomes = &outcomeRecorder{log: log, m: a.m, store: d.Store, clock: d.Clock, instanceID: d.InstanceID,
		timeout: cfg.Redis.Timeout, counts: map[string]int64{},
		known: func(name string) bool { _, ok := catalog[name]; return ok }}
	workers := int64(cfg.Workers)
	prefetch := max(1, workers/4)
	receive := semaphore.NewWeighted(workers + prefetch)
	a.pipeline = &pipeline{src: d.Source, store: d.Store, marks: d.Store, stateFail: cfg.Redis.StateFail, limiter: d.Limiter, runner: d.Runner, validator: validator,
		catalog: catalog, outcomes: a.outcomes, drain: a.drain, clock: d.Clock, log: log, instanceID: d.InstanceID,
		lease: cfg.Queue.VisibilityTimeout, dedupeKey: cfg.Limiter.Dedupe.Key, storeTimeout: cfg.Redis.Timeout,
		receive: receive, run: semaphore.NewWeighted(workers), idle: make(chan struct{}, 1), hard: a.hard, running: map[string]bool{}, alerts: a.alerts}
	a.intake = &intake{src: d.Source, slots: receive, batch: cfg.Queue.BatchSize, log: log, accept: a.pipeline.accept,
		buffered: func() int { return int(a.pipeline.waiting.Load()) }, idle: a.pipeline.idle,
		polls: int((workers + int64(cfg.Queue.BatchSize) - 1) / int64(max(1, cfg.Queue.BatchSize)))}
	a.presence = &presence{store: d.Store, storeTimeout: cfg.Redis.Timeout, drain: a.drain, outcomes: a.outcomes,
		m: a.m, log: log, instanceID: d.InstanceID, version: d.Version, started: d.Clock.Now(), asg: d.ASGName, az: d.AZ}
	a.presence.launchState, a.presence.nudge = a.launchState, make(chan struct{}, 1)
	if d.Watcher != nil {
		a.presence.changed = d.Watcher.StateChanged
	}
	a.presence.up.Store(true)
	if d.CloudWatch != nil {
		asg := d.ASGName
		if asg == "" {
			asg = cfg.Lifecycle.ASGName
		}
		a.publisher = &publisher{api: d.CloudWatch, namespace: cfg.CloudWatch.Namespace, asg: asg,
			every: cfg.CloudWatch.Interval, resolve: cmpResolver(d.ResolveASG, actorResolver(d.Actor, d.InstanceID)), instanceID: d.InstanceID,
			limiter: d.Limiter, clock: d.Clock, log: log}
	}
	a.sup = &supervisor{cfg: cfg.Lifecycle, drain: a.drain, watcher: d.Watcher, actor: d.Actor, store: d.Store,
		storeTimeout: cfg.Redis.Timeout, clock: d.Clock, log: log, m: a.m, cloudwatch: a.publisher,
		presence: a.presence, outcomes: a.outcomes, instanceID: d.InstanceID, stopIntake: stopIntake}
	if err := a.wireResults(); err != nil {
		return nil, err
	}
	if err := a.wireReports(); err != nil {
		return nil, err
	}
	a.m.redisUp.Set(1)
	return a, nil
}

// actorResolver learns the instance's group through the Actor
// (DescribeAutoScalingInstances, or lifecycle.asg_name); nil without one.
func actorResolver(actor *lifecycle.Actor, instanceID string) groupResolver {
	if actor == nil {
		return nil
	}
	return func(ctx context.Context) (string, error) {
		act := lifecycle.Action{InstanceID: instanceID}
		err := actor.ResolveASG(ctx, &act)
		return act.ASGName, err
	}
}

// cmpResolver is the first resolver that is set.
func cmpResolver(first func(context.Context) (string, error), second groupResolver) groupResolver {
	if first != nil {
		return first
	}
	return second
}

// compileCatalog builds the task validator and the runnable catalog.
func compileCatalog(cfg Config) (*task.Validator, map[string]runner.Diagnostic, error) {
	v := &task.Validator{Catalog: map[string]task.Spec{}, MaxAge: cfg.Queue.MaxAge, AllowIPLiterals: cfg.Limiter.Hosts.AllowIPLiterals}
	for _, p := range cfg.Limiter.Hosts.Allow {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("agent: limiter.hosts.allow: %w", err)
		}
		v.Allow = append(v.Allow, re)
	}
	catalog := map[string]runner.Diagnostic{}
	for _, diag := range cfg.Diagnostics {
		diag = diag.WithDefaults()
		catalog[diag.Name] = diag
		spec := task.Spec{Params: map[string]*regexp.Regexp{}, Required: diag.Placeholders()}
		for name, pat := range diag.Params {
			re, err := task.FullMatch(pat)
			if err != nil {
				return nil, nil, fmt.Errorf("agent: diagnostics %s params.%s: %w", diag.Name, name, err)
			}
			spec.Params[name] = re
		}
		v.Catalog[diag.Name] = spec
	}
	return v, catalog, nil
}

// Registry is where the agent's and its components' metrics live.
func (a *Agent) Registry() *prometheus.Registry { return a.d.Registry }

// Drain starts a drain (admin endpoint, signal). The first trigger wins.
func (a *Agent) Drain(source, reason string) bool {
	return a.sup.start(drain.Trigger{Source: source, Reason: reason}, nil)
}

// Started is closed once Run has reconciled what a previous process left
// and serves: intake, presence and the drain supervisor are running.
func (a *Agent) Started() <-chan struct{} { return a.startedCh() }

func (a *Agent) startedCh() chan struct{} {
	a.startOnce.Do(func() { a.started = make(chan struct{}) })
	return a.started
}

// Draining is closed when a drain starts, whatever triggered it.
func (a *Agent) Draining() <-chan struct{} { return a.drain.Draining() }

// Ending says how the drain that Run finished ended; EndingNone until Run
// has returned, or when it returned ErrFastExit before any drain.
func (a *Agent) Ending() Ending { return Ending(a.ending.Load()) }

// Run serves until a drain completes (nil) or ctx ends first (ErrFastExit
// after releasing what was running); ErrCompletionFailed when the drain
// ended but its lifecycle action could not be completed. Ending then says
// how the drain ended. Cancel ctx only for a fast exit; a graceful stop is
// Drain. Run returns after every goroutine it started, including each
// message's handler, has returned; Run is called once.
func (a *Agent) Run(ctx context.Context) error {
	// Handlers can outlive the supervisor's run: a fast exit stops waiting
	// for them after releaseGrace, and a released message's handler may
	// still wait for a worker slot. Cancelling hard first ends both.
	defer a.pipeline.wait()
	stop := context.AfterFunc(ctx, a.cancelHard)
	defer stop()
	defer a.cancelHard()

	a.recoverInterrupted(ctx)
	a.sup.resume(ctx)
	if !a.launchGated() {
		a.launch.Store(launchOpen)
	}
	g, gctx := errgroup.WithContext(ctx)
	done := make(chan struct{})
	// The drain may not end while intake can still hand it work: a poll
	// answered as the drain began delivers messages after Start.
	letGo := a.drain.Hold()
	g.Go(func() error {
		defer letGo()
		if a.awaitLaunch(a.intakeCtx) {
			a.intake.run(a.intakeCtx)
		}
		return nil
	})
	g.Go(func() error { a.presence.run(ctx, done); return nil })
	if a.publisher != nil {
		g.Go(func() error {
			pctx, cancel := context.WithCancel(gctx)
			defer cancel()
			stopOnDone := afterClose(done, cancel)
			defer stopOnDone()
			a.publisher.limiterDegraded(pctx)
			return nil
		})
	}
	if a.d.Watcher != nil {
		g.Go(func() error {
			wctx, cancel := context.WithCancel(gctx)
			defer cancel()
			stopOnDrain := afterClose(a.drain.Draining(), cancel)
			defer stopOnDrain()
			a.watching.Store(true)
			return a.d.Watcher.Run(wctx, func(tr lifecycle.Trigger) {
				a.sup.start(drain.Trigger{Source: tr.Source, Reason: tr.Reason, Deadline: tr.Deadline}, tr.Action)
			})
		})
	}
	if a.notifier != nil {
		// Stopped by the supervisor before the lifecycle completion.
		g.Go(func() error { return a.notifier.d.Run(gctx) })
	}
	// Stopped by the supervisor before the lifecycle completion.
	g.Go(func() error { return a.reports.run(gctx, a.hard) })
	var runErr error
	g.Go(func() error {
		defer close(done)
		var ending Ending
		ending, runErr = a.sup.run(ctx)
		a.ending.Store(int32(ending))
		return nil
	})
	close(a.startedCh())
	err := g.Wait()
	if runErr != nil {
		return runErr
	}
	return err
}

// afterClose calls f once ch is closed, in a goroutine that the returned
// stop ends and waits for.
func afterClose(ch <-chan struct{}, f func()) (stop func()) {
	quit := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-ch:
			f()
		case <-quit:
		}
	}()
	return func() { close(quit); <-ended }
}

// inflightLister lists a store's in-flight entries as they are, including
// those of tasks that ended (state.Redis); a store without it derives its
// entries from the records, so it has no such leftovers.
type inflightLister interface {
	InflightIDs(ctx context.Context, instanceID string) ([]string, error)
}

// recoverInterrupted reconciles the in-flight entries this instance left
// in a previous life: a task still running under this instance has its
// record marked interrupted (the next delivery of its message runs it
// again); a task whose record already has an outcome is left as it is.
// Every entry is removed and audited, and the log says what happens next.
func (a *Agent) recoverInterrupted(ctx context.Context) {
	var entries []state.InflightEntry
	err := callDetached(ctx, a.cfg.Redis.Timeout, func(ctx context.Context) (err error) {
		entries, err = a.d.Store.Inflight(ctx, a.d.InstanceID)
		return err
	})
	if err != nil {
		a.log.Warn("list in-flight tasks of the previous process", "err", err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.TaskID)
	}
	if l, ok := a.d.Store.(inflightLister); ok {
		err := callDetached(ctx, a.cfg.Redis.Timeout, func(ctx context.Context) (err error) {
			ids, err = l.InflightIDs(ctx, a.d.InstanceID)
			return err
		})
		if err != nil {
			a.log.Warn("list in-flight entries of the previous process", "err", err)
		}
	}
	var recs []state.TaskRecord
	err = callDetached(ctx, a.cfg.Redis.Timeout, func(ctx context.Context) (err error) {
		recs, err = a.d.Store.Recover(ctx, a.d.InstanceID)
		return err
	})
	if err != nil {
		a.log.Warn("recover in-flight tasks", "err", err)
		return
	}
	marked := map[string]bool{}
	for _, r := range recs {
		marked[r.ID] = true
		a.log.Warn("task interrupted", "task_id", r.ID, "host", r.Host, "diagnostic", r.Diagnostic, "attempts", r.Attempts,
			"detail", fmt.Sprintf("left running by this instance's previous process; its record is marked interrupted. "+
				"If its message was not deleted, SQS delivers it again once its visibility timeout lapses and it runs as attempt %d; "+
				"if it was deleted, nothing runs it again", r.Attempts+1))
		a.auditRecovery(ctx, state.AuditEntry{TaskID: r.ID, Host: r.Host, Diagnostic: r.Diagnostic, Outcome: state.StatusInterrupted,
			Reason: "left running by this instance's previous process"})
	}
	for _, id := range ids {
		if !marked[id] {
			a.reconcileEntry(ctx, id)
		}
	}
}

// recoveredOutcome is the audit outcome of an in-flight entry removed at
// start whose task was not running under this instance any more.
const recoveredOutcome = "reconciled"

// reconcileEntry logs and audits the removed in-flight entry of a task
// that was not running under this instance any more; its record is left
// alone.
func (a *Agent) reconcileEntry(ctx context.Context, id string) {
	var rec state.TaskRecord
	var found bool
	err := callDetached(ctx, a.cfg.Redis.Timeout, func(ctx context.Context) (err error) {
		rec, found, err = a.d.Store.Task(ctx, id)
		return err
	})
	var detail, reason string
	switch {
	case err != nil:
		reason = "record unreadable"
		detail = "its record could not be read and is left as it is"
	case !found:
		reason = "no record"
		detail = "its record has expired; if its message was not deleted, SQS delivers it again and it runs as a new task"
	case rec.Status == state.StatusDone:
		reason = "already ended " + rec.Outcome
		detail = "the task had already ended (" + rec.Outcome + "); its record is left as it is and nothing runs it again"
	default:
		reason = "owned by a later attempt"
		detail = "a later attempt owns the task (" + rec.Status + " under " + rec.Owner + "); its record is left as it is"
	}
	attrs := []any{"task_id", id, "host", rec.Host, "diagnostic", rec.Diagnostic, "outcome", rec.Outcome, "detail", detail}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	a.log.Info("in-flight entry of the previous process removed", attrs...)
	a.auditRecovery(ctx, state.AuditEntry{TaskID: id, Host: rec.Host, Diagnostic: rec.Diagnostic, Outcome: recoveredOutcome, Reason: reason})
}

// auditRecovery appends a recovery's audit entry, on a call detached from
// ctx like the recovery's other store calls.
func (a *Agent) auditRecovery(ctx context.Context, e state.AuditEntry) {
	e.InstanceID, e.Time = a.d.InstanceID, a.d.Clock.Now()
	if err := callDetached(ctx, a.cfg.Redis.Timeout, func(ctx context.Context) error { return a.d.Store.Audit(ctx, e) }); err != nil {
		logStoreErr(a.log, err)
	}
}

// callWithin runs one call on a fresh context bounded by d, created right
// before the call and detached from shutdown: bookkeeping happens
// mid-drain and after a long run too.
func callWithin(d time.Duration, call func(context.Context) error) error {
	return callDetached(context.Background(), d, call)
}

// callDetached is callWithin for a caller holding a context: the call
// keeps parent's values but not its end.
func callDetached(parent context.Context, d time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
	defer cancel()
	return call(ctx)
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
