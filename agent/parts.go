package agent

import (
	"context"
	"time"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/worker"
)

// newWorker builds the task worker over this agent's parts.
func (a *Agent) newWorker(validator *task.Validator, catalog map[string]runner.Diagnostic) *worker.Worker {
	return worker.New(worker.Options{Source: a.d.Source, Store: a.d.Store, Limiter: a.d.Limiter, Runner: a.runner,
		Validator: validator, Catalog: catalog, Drain: a.drain, Clock: a.d.Clock, Logger: a.log,
		Metrics: worker.Metrics{Received: a.m.received, Outcomes: a.m.outcomes, Duration: a.m.duration,
			Inflight: a.m.inflight, StateDegraded: a.m.stateDegraded},
		Redactor: a.redactor, Hooks: taskHooks{a}, Alerts: a.alerts, InstanceID: a.d.InstanceID,
		Workers: a.cfg.Workers, BatchSize: a.cfg.Queue.BatchSize, Lease: a.cfg.Queue.VisibilityTimeout,
		DedupeKey: a.cfg.Limiter.Dedupe.Key, StoreTimeout: a.cfg.Redis.Timeout, StateFail: a.cfg.Redis.StateFail, Hard: a.hard})
}

// taskHooks are what happens after a task ends: the upload of its whole
// output, its notification and its report job (each nil when off).
type taskHooks struct{ a *Agent }

func (h taskHooks) Keep(rec *state.TaskRecord, res *runner.Result, d runner.Diagnostic) {
	h.a.uploader.keep(rec, res, d)
}

func (h taskHooks) Writes(rec state.TaskRecord, d runner.Diagnostic, res *runner.Result) []state.Write {
	w := h.a.notifier.writes(rec)
	if res != nil {
		w = append(w, h.a.reports.writes(rec, d, *res)...)
	}
	return w
}

// callDetached runs one call on a fresh context bounded by d, keeping
// parent's values but not its end: bookkeeping happens mid-drain too.
func callDetached(parent context.Context, d time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
	defer cancel()
	return call(ctx)
}
