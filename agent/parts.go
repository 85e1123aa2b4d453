package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/launch"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/drain"
)

// newWorker builds the task worker over this agent's parts.
func (a *Agent) newWorker(validator *task.Validator, catalog map[string]runner.Diagnostic) *worker.Worker {
	return worker.New(worker.Options{Source: a.d.Source, Store: a.d.Store, Limiter: a.d.Limiter, Runner: a.hooks.Runner(),
		Validator: validator, Catalog: catalog, Drain: a.drain, Clock: a.d.Clock, Logger: a.log,
		Metrics: worker.Metrics{Received: a.m.received, Outcomes: a.m.outcomes, Duration: a.m.duration,
			Inflight: a.m.inflight, StateDegraded: a.m.stateDegraded, ReceiveWindow: a.m.receiveWindow, Handoff: a.m.handoff},
		Redactor: a.hooks.Redactor(), UploadMax: a.hooks.UploadMax(), Hooks: a.hooks, Alerts: a.alerts, InstanceID: a.d.InstanceID,
		Workers: a.cfg.Workers, BatchSize: a.cfg.Queue.BatchSize, Lease: a.cfg.Queue.VisibilityTimeout,
		DedupeKey: a.cfg.Limiter.Dedupe.Key, StoreTimeout: a.cfg.Redis.Timeout, StateFail: a.cfg.Redis.StateFail, Hard: a.hard,
		Tracing: workerTracing(a.cfg.Queue.URL), Hostname: a.d.Hostname, Placement: a.placement(),
		Approvals: a.approvals})
}

// placement is where the worker sends target tasks: nowhere without host
// names; with them, to the owner of the task's host through the state
// store when it is shared (Redis), else only this agent's own names.
func (a *Agent) placement() worker.Placement {
	if len(a.hostNames) == 0 {
		return worker.Placement{}
	}
	// The presence is built after the worker: it is looked up at each task.
	pl := worker.Placement{Names: a.hostNames, TargetWait: a.cfg.Queue.TargetWait, Routing: a.m.routing,
		Ambiguous: func(name string) []string {
			if a.presence == nil {
				return nil
			}
			return a.presence.ambiguousClaims(name)
		}}
	if a.d.Store.Handoff != nil {
		pl.Hosts = struct {
			state.HostNames
			*state.RedisHandoff
		}{a.d.Store.Presence, a.d.Store.Handoff}
	}
	return pl
}

// workerTracing names the task queue in the worker's spans.
func workerTracing(queueURL string) worker.Tracing {
	if queueURL == "" {
		return worker.Tracing{System: tracing.SystemMemory, Queue: queue.MemoryQueueName}
	}
	return worker.Tracing{System: tracing.SystemSQS, Queue: queue.QueueName(queueURL)}
}

// AlertHandler is this agent's alert listener's handler: tasks go to its task
// queue, and it answers 503 from the first instant of a drain.
func (a *Agent) AlertHandler(getenv func(string) (string, bool)) (http.Handler, error) {
	return listener.NewHandler(a.cfg, listener.Options{Getenv: getenv, Sender: a.alerts.Sender,
		Draining: func() bool { return a.drain.State() != drain.Running },
		Metrics:  a.alerts.Metrics, Logger: a.log.With("component", "alert_listener"), Redactor: a.hooks.Redactor(), Clock: a.d.Clock,
		OnResolved: func(source, eventID string) { a.resolutions.Resolved(context.WithoutCancel(a.hard), source, eventID) },
		Slack: slackact.Options{Approver: slackApproverOf(a.approvals), Feedback: a.feedback.store, Tasks: a.d.Store, Timeout: a.cfg.Redis.Timeout,
			Recorded: func(v string) { a.feedback.total.WithLabelValues(v).Inc() }, Metrics: a.slack}})
}

// newAlertRouting is the alert stage on the task queue (worker.AlertRouting).
func newAlertRouting(cfg config.Config, v *task.Validator, d Deps) (*worker.AlertRouting, error) {
	router, err := alert.NewRouter(cfg.Routes, v)
	if err != nil {
		return nil, fmt.Errorf("agent: routes: %w", err)
	}
	sender := d.AlertSender
	if sender == nil {
		sender = listener.SourceSender{Source: d.Source}
	}
	return &worker.AlertRouting{Router: router, Sender: sender, Metrics: alert.NewMetrics(d.Registry)}, nil
}

// OpenStandaloneListener builds the standalone alert listener (`autodiag intake`) for cfg:
// the alert handler with no workers, sending tasks onto the fleet's SQS
// queue; see listener.Open.
func OpenStandaloneListener(ctx context.Context, cfg config.Config, o OpenOptions, getenv func(string) (string, bool)) (*listener.Standalone, error) {
	connect := func() (listener.SQSBatchAPI, error) {
		awsCfg, err := loadAWS(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return sqs.NewFromConfig(awsCfg), nil
	}
	log := orDiscard(o.Logger)
	return listener.Open(cfg, connect, log, getenv, func(reg prometheus.Registerer) (listener.Stores, error) {
		return intakeStores(ctx, cfg, reg, log)
	})
}

// intakeConns are the standalone intake's connections to Redis: a
// resolution's calls and a Slack button's, a few at a time.
const intakeConns = 8

// intakeStores are the fleet's stores a standalone intake records into
// when Redis is configured: the resolutions of alerts (resolved_at on
// their reports, the metrics on reg) and the Slack buttons' verdicts.
func intakeStores(ctx context.Context, cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (listener.Stores, error) {
	rcfg := cfg.Redis
	if rcfg.URL == "" && rcfg.URLSecret == "" && len(rcfg.Addrs) == 0 {
		return listener.Stores{}, nil
	}
	if rcfg.URLSecret != "" {
		awsCfg, err := loadAWS(ctx, cfg)
		if err != nil {
			return listener.Stores{}, err
		}
		if rcfg.URL, err = redisURLFromSecret(ctx, rcfg.URLSecret, awsCfg); err != nil {
			return listener.Stores{}, err
		}
		rcfg.URLSecret = ""
	}
	rc, err := NewRedisClient(rcfg, intakeConns)
	if err != nil || rc == nil {
		return listener.Stores{}, err
	}
	store := state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards})
	diagnostics := make([]string, 0, len(cfg.Diagnostics))
	for _, d := range cfg.Diagnostics {
		diagnostics = append(diagnostics, d.Name)
	}
	rec, err := resolution.NewRecorder(resolution.NewRedis(rc, cfg.Redis.Prefix), store, diagnostics, nil, cfg.Redis.Timeout,
		log.With("component", "resolution"), reg)
	if err != nil {
		_ = rc.Close()
		return listener.Stores{}, fmt.Errorf("intake: resolution: %w", err)
	}
	// The resolved event goes to the fleet's outbox, as the agent's intake
	// sends it; the agents deliver it.
	ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix, ClaimIdle: cfg.NotifyClaimIdle, MaxLen: int64(cfg.NotifyOutboxMax)})
	resolved, err := hooks.OutboxResolved(cfg, ob, "intake", log)
	if err != nil {
		_ = rc.Close()
		return listener.Stores{}, fmt.Errorf("intake: %w", err)
	}
	if resolved != nil {
		rec.Notify(resolved)
	}
	return listener.Stores{
		Resolved: func(source, eventID string) { rec.Resolved(context.WithoutCancel(ctx), source, eventID) },
		Feedback: feedback.NewRedis(rc, cfg.Redis.Prefix, 0), Tasks: store,
		Close: func() { _ = rc.Close() }}, nil
}

// buildGate builds the launch gate over this agent's parts; the instance
// record tells its phase.
func (a *Agent) buildGate() {
	a.gate = launch.New(launch.Options{Config: a.cfg, Watcher: a.d.Watcher, Actor: a.d.Actor, Store: a.d.Store,
		Queue: a.d.Queue, Logger: a.log, Nudge: a.presence.nudge})
	a.presence.launchState = a.gate.State
}

// newApprovals builds the approval gate: parked tasks in d.Approvals (in
// memory when nil), decided ones sent on through the task queue, each
// newly parked one an approval_requested event.
func newApprovals(cfg config.Config, d Deps, h *hooks.Hooks, log *slog.Logger) (*approval.Approvals, error) {
	store := d.Approvals
	if store == nil {
		store = approval.NewMemoryWith(approval.MemoryOptions{Keep: cfg.Queue.MaxAge})
	}
	src := d.Source
	return approval.New(approval.Options{Store: store,
		Send:      func(ctx context.Context, body []byte) error { _, err := src.Send(ctx, body); return err },
		Requested: h.ApprovalRequested, Redact: h.Redactor().RedactString, Clock: d.Clock,
		Log: log.With("component", "approval"), Timeout: cfg.Redis.Timeout, Registry: d.Registry})
}
