package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/worker"
)

// TaskView is a task record as GET /v1/tasks/{id} returns it; webhook
// events carry the same fields with the output cut to an excerpt.
type TaskView = notify.Task

// NewTaskView shapes a stored record for the API.
func NewTaskView(rec state.TaskRecord) TaskView {
	v := TaskView{ID: rec.ID, Host: rec.Host, Diagnostic: rec.Diagnostic, Params: rec.Params, Severity: rec.Severity,
		Status: rec.Status, Outcome: rec.Outcome, Reason: rec.Reason, Attempts: rec.Attempts, Owner: rec.Owner,
		ReceivedAt: timePtr(rec.ReceivedAt), StartedAt: timePtr(rec.StartedAt), FinishedAt: timePtr(rec.FinishedAt),
		Output: rec.Output, Truncated: rec.Truncated, OutputURL: rec.OutputURL, OutputUpload: rec.OutputUpload, Limiter: rec.Limiter, Report: rec.Report}
	if rec.Alert != nil {
		v.Alert = &notify.Alert{Source: rec.Alert.Source, Name: rec.Alert.Name, EventID: rec.Alert.EventID}
	}
	switch rec.Outcome {
	case worker.OutcomeSucceeded, worker.OutcomeFailed, worker.OutcomeTimedOut: // the diagnostic ran
		code := rec.ExitCode
		v.ExitCode = &code
	}
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// getTask serves GET /v1/tasks/{id}: the record from the state store
// (memory or Redis), 404 when there is none.
func (a *Agent) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), max(a.cfg.Redis.Timeout, time.Second))
	defer cancel()
	rec, ok, err := a.d.Store.Task(ctx, id)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "state store: " + err.Error(), "reason": "state_unavailable"})
	case !ok:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
	default:
		writeJSON(w, http.StatusOK, NewTaskView(rec))
	}
}

// recentTasks lists the ids of the newest task outcomes (the audit
// stream), newest first, for `autodiag status` without Redis.
func (a *Agent) recentTasks(ctx context.Context, n int) []string {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Redis.Timeout)
	defer cancel()
	entries, err := a.d.Store.RecentAudit(ctx, n)
	if err != nil {
		return nil
	}
	ids := []string{}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.TaskID != "" && !seen[e.TaskID] {
			seen[e.TaskID] = true
			ids = append(ids, e.TaskID)
		}
	}
	return ids
}

// recentTaskIDs is how many recent task ids GET /v1/status lists.
const recentTaskIDs = 20

// wireResults builds what happens to a result: the redactor (its metric
// on the agent's registry) and, with sinks configured, the notification
// dispatcher over the outbox (Deps.Outbox, else in memory).
func (a *Agent) wireResults() error {
	red, err := redact.New(a.cfg.Results.Redact.Effective(), a.d.Registry)
	if err != nil {
		return fmt.Errorf("agent: results.redact: %w", err)
	}
	a.redactor = red
	if err := a.wireUpload(); err != nil {
		return err
	}
	if len(a.cfg.Notify) == 0 {
		return nil
	}
	sinks, err := notify.NewSinks(a.cfg.Notify, a.d.LookupEnv, nil)
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	ob := a.d.Outbox
	if ob == nil {
		ob = notify.NewMemoryOutbox(notify.MemoryOptions{ClaimIdle: a.cfg.NotifyClaimIdle})
	}
	disp, err := notify.NewDispatcher(ob, sinks, notify.Options{InstanceID: a.d.InstanceID, MaxAge: a.cfg.NotifyMaxAge,
		StoreTimeout: a.cfg.Redis.Timeout, Clock: a.d.Clock.Now, Logger: a.log, Registerer: a.d.Registry})
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	a.notifier = &notifier{d: disp, base: context.WithoutCancel(a.hard), timeout: a.cfg.Redis.Timeout, clock: a.d.Clock, log: a.log.With("component", "notify")}
	return nil
}
