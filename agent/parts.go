package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/drain"
)

// workerOptions are the task worker's options over this agent's parts
// built before the hooks: New completes them with the hooks' (Runner,
// Hooks, UploadMax) and the alert stage and approvals.
func (a *Agent) workerOptions(validator *task.Validator, catalog map[string]runner.Diagnostic, red *redact.Redactor) worker.Options {
	return worker.Options{Source: a.d.Source, Store: a.d.Store, Limiter: a.d.Limiter,
		Validator: validator, Catalog: catalog, Drain: a.drain, Clock: a.d.Clock, Logger: a.log,
		Metrics: worker.Metrics{Received: a.m.received, Outcomes: a.m.outcomes, Duration: a.m.duration,
			Inflight: a.m.inflight, StateDegraded: a.m.stateDegraded, ReceiveWindow: a.m.receiveWindow, Handoff: a.m.handoff},
		Redactor: red, InstanceID: a.d.InstanceID,
		Workers: a.cfg.Workers, BatchSize: a.cfg.Queue.BatchSize, Lease: a.cfg.Queue.VisibilityTimeout,
		DedupeKey: a.cfg.Limiter.Dedupe.Key, StoreTimeout: a.cfg.Redis.Timeout, StateFail: a.cfg.Redis.StateFail, Hard: a.hard,
		Tracing: workerTracing(a.cfg.Queue.URL), Hostname: a.d.Hostname, Placement: a.placement(),
		AlertBatch: a.d.AlertSender}
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
	return listener.NewHandler(a.cfg, listener.Options{Getenv: getenv, Sender: a.alerts.Sender, Router: a.alerts.Router,
		Draining: func() bool { return a.drain.State() != drain.Running },
		Metrics:  a.alerts.Metrics, Logger: a.log.With("component", "alert_listener"), Redactor: a.hooks.Redactor(), Clock: a.d.Clock,
		Slack: slackact.Options{Approver: slackApproverOf(a.approvals), Feedback: a.feedback.Store(), Tasks: a.d.Store, Timeout: a.cfg.Redis.Timeout,
			Recorded: a.feedback.Count, Metrics: a.slack}})
}

// newAlertRouting is the alert stage, on the task queue
// (worker.AlertRouting) and behind the alert listener (AlertHandler): its
// tasks go in through the one way in, every resolved alert is recorded
// (on a call detached from the request, within base), and a CloudWatch
// alarm's OK, which names the alarm, resolves the firing the recorder
// remembers.
func newAlertRouting(cfg config.Config, v *task.Validator, submit alert.Sender, rec *resolution.Recorder, base context.Context,
	reg prometheus.Registerer) (*worker.AlertRouting, error) {
	router, err := alert.NewRouter(cfg.Routes, v)
	if err != nil {
		return nil, fmt.Errorf("agent: routes: %w", err)
	}
	router.WatchResolved(func(al alert.Received) { rec.Resolved(context.WithoutCancel(base), al.Source, al.EventID) })
	return &worker.AlertRouting{Router: router, Sender: submit, Metrics: alert.NewMetrics(reg), Alarms: rec}, nil
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
