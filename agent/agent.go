package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

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
	// CloudWatch publishes DrainSeconds and LimiterDegraded; nil = off.
	CloudWatch cloudWatchAPI
	// ASGName is the dimension of the CloudWatch metrics.
	ASGName string

	InstanceID string
	Version    string
	Logger     *slog.Logger
	Registry   *prometheus.Registry
	Clock      Clock
	// Runner executes diagnostics; nil = a default *runner.Runner.
	Runner Runner
	// Outbox holds notifications until a sink took them; nil = in memory.
	Outbox notify.Outbox
	// LookupEnv reads the sinks' url_env and secret_env; nil = an empty
	// environment.
	LookupEnv func(string) (string, bool)
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
	notifier  *notifier  // nil = no sinks

	// hard ends on a fast exit; intakeCtx at the first instant of a drain.
	hard       context.Context
	cancelHard context.CancelFunc
	intakeCtx  context.Context
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
	a := &Agent{cfg: cfg, d: d, log: log, m: newMetrics(d.Registry), validator: validator}
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
		receive: receive, run: semaphore.NewWeighted(workers), hard: a.hard, running: map[string]bool{}}
	a.intake = &intake{src: d.Source, slots: receive, batch: cfg.Queue.BatchSize, log: log, accept: a.pipeline.accept}
	a.presence = &presence{store: d.Store, storeTimeout: cfg.Redis.Timeout, drain: a.drain, outcomes: a.outcomes,
		m: a.m, log: log, instanceID: d.InstanceID, version: d.Version, started: d.Clock.Now()}
	a.presence.up.Store(true)
	if d.CloudWatch != nil {
		asg := d.ASGName
		if asg == "" {
			asg = cfg.Lifecycle.ASGName
		}
		a.publisher = &publisher{api: d.CloudWatch, namespace: cfg.CloudWatch.Namespace, asg: asg,
			limiter: d.Limiter, clock: d.Clock, log: log}
	}
	a.sup = &supervisor{cfg: cfg.Lifecycle, drain: a.drain, watcher: d.Watcher, actor: d.Actor, store: d.Store,
		storeTimeout: cfg.Redis.Timeout, clock: d.Clock, log: log, m: a.m, cloudwatch: a.publisher,
		presence: a.presence, outcomes: a.outcomes, instanceID: d.InstanceID, stopIntake: stopIntake, hard: a.hard}
	if err := a.wireResults(); err != nil {
		return nil, err
	}
	a.m.redisUp.Set(1)
	return a, nil
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

// Run serves until a drain completes (nil) or ctx ends first (ErrFastExit
// after releasing what was running). Cancel ctx only for a fast exit; a
// graceful stop is Drain. Run returns after every goroutine it started,
// including each message's handler, has returned; Run is called once.
func (a *Agent) Run(ctx context.Context) error {
	// Handlers can outlive the supervisor's run: a fast exit stops waiting
	// for them after releaseGrace, and a released message's handler may
	// still wait for a worker slot. Cancelling hard first ends both.
	defer a.pipeline.wait()
	stop := context.AfterFunc(ctx, a.cancelHard)
	defer stop()
	defer a.cancelHard()

	a.recoverInterrupted()
	a.sup.resume()
	g, gctx := errgroup.WithContext(a.hard)
	done := make(chan struct{})
	// The drain may not end while intake can still hand it work: a poll
	// answered as the drain began delivers messages after Start.
	letGo := a.drain.Hold()
	g.Go(func() error { defer letGo(); a.intake.run(a.intakeCtx); return nil })
	g.Go(func() error { a.presence.run(done); return nil })
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
			return a.d.Watcher.Run(wctx, func(tr lifecycle.Trigger) {
				a.sup.start(drain.Trigger{Source: tr.Source, Reason: tr.Reason, Deadline: tr.Deadline}, tr.Action)
			})
		})
	}
	if a.notifier != nil {
		// Stopped by the supervisor before the lifecycle completion.
		g.Go(func() error { return a.notifier.d.Run(gctx) })
	}
	var runErr error
	g.Go(func() error {
		defer close(done)
		runErr = a.sup.run(ctx)
		return nil
	})
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

// recoverInterrupted marks tasks this instance left running in a previous
// life as interrupted.
func (a *Agent) recoverInterrupted() {
	var recs []state.TaskRecord
	err := callWithin(a.cfg.Redis.Timeout, func(ctx context.Context) (err error) {
		recs, err = a.d.Store.Recover(ctx, a.d.InstanceID)
		return err
	})
	if err != nil {
		a.log.Warn("recover in-flight tasks", "err", err)
		return
	}
	for _, r := range recs {
		a.log.Warn("task interrupted", "task_id", r.ID, "host", r.Host, "diagnostic", r.Diagnostic, "attempts", r.Attempts,
			"detail", "left running by this instance's previous process")
		a.outcomes.audit(state.AuditEntry{TaskID: r.ID, Host: r.Host, Diagnostic: r.Diagnostic, Outcome: "interrupted"})
	}
}

// callWithin runs one call on a fresh context bounded by d, created right
// before the call and detached from shutdown: bookkeeping happens
// mid-drain and after a long run too.
func callWithin(d time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return call(ctx)
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
