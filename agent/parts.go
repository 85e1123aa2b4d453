package agent

import (
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/launch"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
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
			Inflight: a.m.inflight, StateDegraded: a.m.stateDegraded, ReceiveWindow: a.m.receiveWindow},
		Redactor: a.hooks.Redactor(), UploadMax: a.hooks.UploadMax(), Hooks: a.hooks, Alerts: a.alerts, InstanceID: a.d.InstanceID,
		Workers: a.cfg.Workers, BatchSize: a.cfg.Queue.BatchSize, Lease: a.cfg.Queue.VisibilityTimeout,
		DedupeKey: a.cfg.Limiter.Dedupe.Key, StoreTimeout: a.cfg.Redis.Timeout, StateFail: a.cfg.Redis.StateFail, Hard: a.hard,
		Tracing: workerTracing(a.cfg.Queue.URL), Hostname: a.d.Hostname, Placement: a.placement()})
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
	if h, ok := a.d.Store.(worker.Hosts); ok {
		pl.Hosts = h
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
		OnResolved: func(source, eventID string) { a.resolutions.Resolved(context.WithoutCancel(a.hard), source, eventID) }})
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
	return listener.Open(cfg, connect, orDiscard(o.Logger), getenv)
}

// buildGate builds the launch gate over this agent's parts; the instance
// record tells its phase.
func (a *Agent) buildGate() {
	a.gate = launch.New(launch.Options{Config: a.cfg, Watcher: a.d.Watcher, Actor: a.d.Actor, Store: a.d.Store,
		Source: a.d.Source, Logger: a.log, Nudge: a.presence.nudge})
	a.presence.launchState = a.gate.State
}
