package hooks

import (
	"context"
	"fmt"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TaskView is a task record as GET /v1/tasks/{id} returns it; webhook
// events carry the same fields with the output cut to an excerpt.
type TaskView = notify.Task

// NewTaskView shapes a stored record for the API.
func NewTaskView(rec state.TaskRecord) TaskView {
	v := TaskView{ID: rec.ID, Host: rec.Host, Diagnostic: rec.Diagnostic, Params: rec.Params, Severity: rec.Severity,
		Status: rec.Status, Outcome: rec.Outcome, Reason: rec.Reason, Attempts: rec.Attempts, Owner: rec.Owner,
		ReceivedAt: timePtr(rec.ReceivedAt), StartedAt: timePtr(rec.StartedAt), FinishedAt: timePtr(rec.FinishedAt),
		Output: rec.Output, Truncated: rec.Truncated, OutputURL: rec.OutputURL, OutputUpload: rec.OutputUpload, Limiter: rec.Limiter, Report: rec.Report,
		Origin: rec.Origin, Parent: rec.Parent, Investigation: rec.Investigation, Step: rec.Step}
	if rec.Alert != nil {
		v.Alert = &notify.Alert{Source: rec.Alert.Source, Name: rec.Alert.Name, EventID: rec.Alert.EventID}
	}
	switch rec.Outcome {
	case outcome.Succeeded, outcome.Failed, outcome.TimedOut: // the diagnostic ran
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

// wireResults builds what happens to a result: the redactor (its metric
// on the agent's registry) and, with sinks configured, the notification
// dispatcher over the outbox (Deps.Outbox, else in memory).
func (h *Hooks) wireResults(o Options) error {
	red, err := redact.New(o.Config.Results.Redact.Effective(), o.Registry)
	if err != nil {
		return fmt.Errorf("agent: results.redact: %w", err)
	}
	h.redactor = red
	if err := h.wireUpload(o); err != nil {
		return err
	}
	if len(o.Config.Notify) == 0 {
		return nil
	}
	sinks, err := notify.NewSinks(o.Config.Notify, o.LookupEnv, nil)
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	ob := o.Outbox
	if ob == nil {
		ob = notify.NewMemoryOutbox(notify.MemoryOptions{ClaimIdle: o.Config.NotifyClaimIdle, MaxLen: o.Config.NotifyOutboxMax})
	}
	disp, err := notify.NewDispatcher(ob, sinks, notify.Options{InstanceID: o.InstanceID, MaxAge: o.Config.NotifyMaxAge,
		StoreTimeout: o.Config.Redis.Timeout, Clock: o.Clock, Logger: o.Logger, Registerer: o.Registry})
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	h.notifier = &notifier{d: disp, base: context.WithoutCancel(o.Base), timeout: o.Config.Redis.Timeout, clock: o.Clock, log: o.Logger.With("component", "notify")}
	return nil
}
