package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/cwpublish"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/launch"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
	"github.com/prometheus/client_golang/prometheus"
)

// Deps are the agent's collaborators; Open builds them from a Config.
type Deps struct {
	Source queue.Source
	// Queue is Source's readiness check at launch when it has one (SQS);
	// nil = none.
	Queue   launch.Reachable
	Store   state.Store
	Limiter *limiter.Limiter
	// RedisServer samples INFO clients of the state store's Redis (the
	// node nearest its maxclients); nil without Redis.
	RedisServer func(context.Context) (open.ServerClients, error)
	// Watcher is nil when only the signal source is configured; Actor
	// too, unless lifecycle.launch_hook_name is set.
	Watcher *lifecycle.Watcher
	Actor   *lifecycle.Actor
	// CloudWatch publishes DrainSeconds and LimiterDegraded; nil = off.
	CloudWatch cwpublish.API
	// S3 takes the full outputs of results.s3 (NewS3Client); needed when
	// results.s3.bucket is set.
	S3 hooks.S3API
	// ASGName is the dimension of the CloudWatch metrics, and with AZ
	// places the instance in its record (limiter max_percent scopes).
	ASGName string
	AZ      string
	// ResolveASG learns the instance's group for the CloudWatch metrics
	// when ASGName is empty (DescribeAutoScalingInstances); nil = through
	// Actor, or not at all without one.
	ResolveASG func(ctx context.Context) (string, error)

	InstanceID string
	// HostNames are the names this agent answers for (learnt and
	// host_names), in order, the canonical one first: a target
	// diagnostic of a task naming another runs on that name's agent, never
	// here. Empty = no placement, every task runs where it is received.
	HostNames []string
	Version   string
	Logger    *slog.Logger
	Registry  *prometheus.Registry
	Clock     clock.Clock
	// Runner executes diagnostics; nil = a default *runner.Runner.
	Runner worker.Runner
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
	Reports *hooks.ReportParts
	// Hostname is this machine's hostname, learnt once at start (Open:
	// os.Hostname); with InstanceID it is every run's ran_on.
	Hostname string
	// Feedback keeps responders' verdicts on reports; nil = in memory.
	Feedback feedback.Store
	// Resolutions keeps alerts' tasks and resolutions; nil = in memory.
	Resolutions resolution.Store
	// Approvals keeps the tasks parked for a person's approval; nil =
	// in memory.
	Approvals approval.Store
	// OriginKey signs and verifies the origin of investigation tool calls
	// (task.SignOrigin); every agent of a fleet must hold the same. Nil =
	// a random key of this agent's own (embedded mode).
	OriginKey []byte
}

// Agent is one `autodiag run`: it builds the hooks, the task worker, the
// launch gate, the instance record, the CloudWatch publisher and the drain
// supervisor from one config, and runs them until a drain completes.
type Agent struct {
	cfg config.Config
	d   Deps
	log *slog.Logger
	m   *metrics

	drain     *drain.Controller
	validator *task.Validator
	worker    *worker.Worker
	sup       *supervisor.Supervisor
	gate      *launch.Gate
	presence  *presence
	// hostNames are the names this agent answers for, normalised, the
	// canonical one first; nil = no placement.
	hostNames []string
	publisher *cwpublish.Publisher // nil = CloudWatch off
	alerts    *worker.AlertRouting
	hooks     *hooks.Hooks
	feedback  *admin.Feedback
	admin     *admin.API
	// approvals parks the tasks of diagnostics with approval: required.
	approvals *approval.Approvals
	// resolutions indexes alert tasks and records their alerts' resolution.
	resolutions *resolution.Recorder
	// slack counts the intake's Slack interactions (registered at start,
	// so the series exist before the intake serves).
	slack *slackact.Metrics

	// hard ends on a fast exit; intakeCtx at the first instant of a drain.
	hard       context.Context
	cancelHard context.CancelFunc
	intakeCtx  context.Context
	stopIntake context.CancelFunc
	// intakeRan is set once Run has started the intake, which closes
	// intakeEnded when it has ended (endIntake waits for it).
	intakeRan   atomic.Bool
	intakeEnded chan struct{}

	started chan struct{} // closed once Run serves; see Started
	ending  atomic.Int32  // an Ending, set when Run returns
}

// New assembles an agent from validated config and its dependencies, in
// one pass: each part is built from the config and the parts before it.
func New(cfg config.Config, d Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Source == nil || d.Store.TaskStore == nil || d.Limiter == nil {
		return nil, errors.New("agent: Source, Store and Limiter are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Clock == nil {
		d.Clock = clock.Wall{}
	}
	if d.Runner == nil {
		d.Runner = &runner.Runner{}
	}
	validator, catalog, err := cfg.CompileCatalog()
	if err != nil {
		return nil, err
	}
	validator.OriginKey = d.OriginKey
	if validator.OriginKey == nil {
		validator.OriginKey = make([]byte, 32)
		_, _ = rand.Read(validator.OriginKey) // crypto/rand.Read never fails
	}
	log := d.Logger.With("instance_id", d.InstanceID)
	diagnostics := make([]string, 0, len(cfg.Diagnostics))
	for _, diag := range cfg.Diagnostics {
		diagnostics = append(diagnostics, diag.Name)
	}
	a := &Agent{cfg: cfg, d: d, log: log, m: newMetrics(d.Registry, diagnostics), validator: validator,
		started: make(chan struct{}), intakeEnded: make(chan struct{})}
	a.drain = drain.New(cfg.Drain)
	a.hard, a.cancelHard = context.WithCancel(context.Background())
	a.intakeCtx, a.stopIntake = context.WithCancel(a.hard)
	if len(d.HostNames) > 0 {
		a.hostNames = ownHostNames(d.HostNames...)
		log.Info("host names this agent answers for", "host_names", strings.Join(a.hostNames, ","))
		validator.OwnedAddr = ownedAddr(a.hostNames, d.Store.Presence, cfg.Redis.Timeout)
	}
	red, err := hooks.NewRedactor(cfg, d.LookupEnv, d.Registry)
	if err != nil {
		return nil, err
	}
	// The one way in (worker.Submitter) comes first: the alert stage, the
	// hooks' investigations and the admin API submit through it, and the
	// worker ends its tasks through its outcome recorder.
	wo := a.workerOptions(validator, catalog, red)
	wo.Submitter = worker.NewSubmitter(wo)

	rstore := d.Resolutions
	if rstore == nil {
		rstore = resolution.NewMemory(d.Clock)
	}
	if a.resolutions, err = resolution.NewRecorder(rstore, d.Store, diagnostics, d.Clock, cfg.Redis.Timeout,
		log.With("component", "resolution"), d.Registry); err != nil {
		return nil, fmt.Errorf("agent: resolution: %w", err)
	}
	// The alert router and its validator are built once: the alarms on
	// the task queue and the alert listener share them.
	if a.alerts, err = newAlertRouting(cfg, validator, wo.Submitter, a.resolutions, a.hard, d.Registry); err != nil {
		return nil, err
	}
	if a.hooks, err = hooks.New(hooks.Options{TaskEnded: a.resolutions.TaskEnded, ReportWritten: a.resolutions.ReportWritten, Config: cfg, Store: d.Store, Outbox: d.Outbox, LookupEnv: d.LookupEnv, S3: d.S3,
		Reports: d.Reports, InstanceID: d.InstanceID, Clock: d.Clock, Logger: log, Registry: d.Registry,
		Base: a.hard, Redactor: red, Tasks: wo.Submitter, Validator: validator}); err != nil {
		return nil, err
	}
	a.resolutions.Notify(a.hooks.Resolved)
	a.slack = slackact.NewMetrics(d.Registry)
	if a.feedback, err = admin.NewFeedback(d.Feedback, a.resolutions, d.Store, red, d.Clock, cfg.Redis.Timeout, d.Registry); err != nil {
		return nil, fmt.Errorf("agent: feedback: %w", err)
	}
	if a.approvals, err = newApprovals(cfg, d, a.hooks, log); err != nil {
		return nil, fmt.Errorf("agent: approvals: %w", err)
	}
	wo.Runner, wo.Hooks, wo.UploadMax, wo.Alerts, wo.Approvals = hooks.FullOutput(d.Runner, cfg.Results.S3), a.hooks, a.hooks.UploadMax(), a.alerts, a.approvals
	a.worker = worker.New(wo)
	// The launch gate nudges the instance record when intake opens or is
	// refused; the record tells the gate's phase.
	nudge := make(chan struct{}, 1)
	a.gate = launch.New(launch.Options{Config: cfg, Watcher: d.Watcher, Actor: d.Actor, Store: d.Store,
		Queue: d.Queue, Logger: log, Nudge: nudge})
	var changed func() <-chan struct{}
	if d.Watcher != nil {
		changed = d.Watcher.StateChanged
	}
	a.presence = &presence{store: d.Store, storeTimeout: cfg.Redis.Timeout, drain: a.drain, outcomes: a.worker,
		m: a.m, log: log, instanceID: d.InstanceID, version: d.Version, started: d.Clock.Now(), asg: d.ASGName, az: d.AZ,
		names: a.hostNames, hostname: firstOwn(d.Hostname), drainedTTL: max(drainedInstanceTTL, cfg.Queue.TargetWait),
		nudge: nudge, claims: d.Store.HostClaims, server: d.RedisServer, launchState: a.gate.State, changed: changed}
	if d.CloudWatch != nil {
		asg := d.ASGName
		if asg == "" {
			asg = cfg.Lifecycle.ASGName
		}
		a.publisher = cwpublish.New(cwpublish.Options{API: d.CloudWatch, Namespace: cfg.CloudWatch.Namespace, ASG: asg,
			Every: cfg.CloudWatch.Interval, Resolve: cmpResolver(d.ResolveASG, actorResolver(d.Actor, d.InstanceID)), InstanceID: d.InstanceID,
			Limiter: d.Limiter, Clock: d.Clock, Logger: log})
	}
	a.sup = a.newSupervisor(d.Watcher, d.Actor)
	a.admin = admin.New(admin.Options{Config: cfg, Registry: d.Registry, Drain: a.drain, StartDrain: a.Drain, Gate: a.gate,
		Actor: d.Actor, Worker: a.worker, RedisUp: a.presence.redisUp, Store: d.Store, Approvals: a.approvals,
		Validator: validator, Limiter: d.Limiter, Hooks: a.hooks, Feedback: a.feedback, HostNames: a.hostNames,
		InstanceID: d.InstanceID, Version: d.Version, Clock: d.Clock, Logger: log, RedisIOTimeout: open.IOTimeout(cfg.Redis.Timeout)})
	a.m.redisUp.Set(1)
	return a, nil
}

// actorResolver learns the instance's group through the Actor
// (DescribeAutoScalingInstances, or lifecycle.asg_name); nil without one.
func actorResolver(actor *lifecycle.Actor, instanceID string) cwpublish.GroupResolver {
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
func cmpResolver(first func(context.Context) (string, error), second cwpublish.GroupResolver) cwpublish.GroupResolver {
	if first != nil {
		return first
	}
	return second
}

// Status is the agent's current status (GET /v1/status).
func (a *Agent) Status() admin.Status { return a.admin.Status() }

// Handler serves the admin API (README "Admin HTTP").
func (a *Agent) Handler() http.Handler { return a.admin.Handler() }

// Registry is where the agent's and its components' metrics live.
func (a *Agent) Registry() *prometheus.Registry { return a.d.Registry }

// Drain starts a drain (admin endpoint, signal). The first trigger wins.
func (a *Agent) Drain(source, reason string) bool {
	return a.sup.Start(drain.Trigger{Source: source, Reason: reason}, nil)
}

// Started is closed once Run has reconciled what a previous process left
// and serves: intake, presence and the drain supervisor are running.
func (a *Agent) Started() <-chan struct{} { return a.started }

// Draining is closed when a drain starts, whatever triggered it.
func (a *Agent) Draining() <-chan struct{} { return a.drain.Draining() }

// Ending says how the drain that Run finished ended; EndingNone until Run
// has returned, or when it returned ErrFastExit before any drain.
func (a *Agent) Ending() supervisor.Ending { return supervisor.Ending(a.ending.Load()) }

// Run serves until a drain completes (nil) or ctx ends first (ErrFastExit
// after releasing what was running); ErrCompletionFailed when the drain
// ended but its lifecycle action could not be completed. Ending then says
// how the drain ended. Cancel ctx only for a fast exit; a graceful stop is
// Drain. Run returns after every goroutine it started, including each
// message's handler, has returned; Run is called once.
func (a *Agent) Run(ctx context.Context) error {
	// Handlers can outlive the supervisor's run: a fast exit stops waiting
	// for them after supervisor.ReleaseGrace, and a released message's handler may
	// still wait for a worker slot. Cancelling hard first ends both.
	defer a.worker.Wait()
	stop := context.AfterFunc(ctx, a.cancelHard)
	defer stop()
	defer a.cancelHard()

	a.worker.Recover(ctx)
	a.sup.Resume(ctx)
	if !a.gate.Gated() {
		a.gate.Open()
	}
	g, gctx := errgroup.WithContext(ctx)
	done := make(chan struct{})
	// The drain may not end while intake can still hand it work: a poll
	// answered as the drain began delivers messages after Start.
	letGo := a.drain.Hold()
	a.intakeRan.Store(true)
	g.Go(func() error {
		defer letGo()
		defer close(a.intakeEnded)
		if a.gate.Await(a.intakeCtx) {
			var handed sync.WaitGroup
			handed.Go(func() { a.worker.TakeHanded(a.intakeCtx) })
			a.worker.Receive(a.intakeCtx)
			handed.Wait()
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
			a.publisher.LimiterDegraded(pctx)
			return nil
		})
	}
	if a.d.Watcher != nil {
		g.Go(func() error {
			wctx, cancel := context.WithCancel(gctx)
			defer cancel()
			stopOnDrain := afterClose(a.drain.Draining(), cancel)
			defer stopOnDrain()
			a.gate.Watching()
			return a.d.Watcher.Run(wctx, func(tr lifecycle.Trigger) {
				a.sup.Start(drain.Trigger{Source: tr.Source, Reason: tr.Reason, Deadline: tr.Deadline}, tr.Action)
			})
		})
	}
	// The approvals' sweep ends with intake: a draining agent parks and
	// sends on nothing more (the other agents' sweeps do).
	g.Go(func() error { a.approvals.Run(a.intakeCtx); return nil })
	// Both stopped by the supervisor before the lifecycle completion.
	g.Go(func() error { return a.hooks.RunNotify(gctx) })
	g.Go(func() error { return a.hooks.RunReports(gctx, a.hard) })
	var runErr error
	g.Go(func() error {
		defer close(done)
		var ending supervisor.Ending
		ending, runErr = a.sup.Run(ctx)
		a.ending.Store(int32(ending))
		return nil
	})
	close(a.started)
	err := g.Wait()
	if runErr != nil {
		return runErr
	}
	return err
}

// endIntake stops the intake at a drain's first instant. A source only
// this agent consumes (queue.Sealer: the embedded queue) holds work it
// accepted, which nothing else will ever receive: once the receive loop
// has ended, so that no receive of it is taken in after the drain has
// begun (and released at once), it is sealed and what it held is taken
// in, for the drain to finish as received work.
func (a *Agent) endIntake() {
	a.stopIntake()
	sealer, ok := a.d.Source.(queue.Sealer)
	if !ok {
		return
	}
	if a.intakeRan.Load() {
		<-a.intakeEnded
	}
	a.worker.TakeIn(sealer.Seal())
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
