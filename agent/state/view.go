package state

import (
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// View is the record as it leaves the agent (GET /v1/tasks/{id},
// `autodiag show`, notification events): times in UTC and absent when
// unset, the exit code only when the diagnostic ran, and the trace's link
// made by link (tracing.Link; nil: none).
func (r TaskRecord) View(link func(traceID string) string) taskview.Task {
	v := taskview.Task{ID: r.ID, Host: r.Host, HostAsSent: r.HostAsSent, Diagnostic: r.Diagnostic, Params: r.Params, Severity: r.Severity,
		Status: r.Status, Outcome: r.Outcome, Reason: r.Reason, Attempts: r.Attempts, Owner: r.Owner,
		ReceivedAt: timePtr(r.ReceivedAt), StartedAt: timePtr(r.StartedAt), FinishedAt: timePtr(r.FinishedAt),
		Output: r.Output, Truncated: r.Truncated, OutputURL: r.OutputURL, OutputUpload: r.OutputUpload, Limiter: r.Limiter, Report: r.Report,
		Origin: r.Origin, Parent: r.Parent, Investigation: r.Investigation, Step: r.Step,
		TraceID: r.TraceID, SpanID: r.SpanID}
	if link != nil {
		v.TraceURL = link(r.TraceID)
	}
	if r.Alert != nil {
		a := *r.Alert
		v.Alert = &a
	}
	if r.Approval != nil {
		ap := *r.Approval
		v.Approval = &ap
	}
	if r.RanOn != nil {
		ro := *r.RanOn
		v.RanOn = &ro
	}
	if outcome.Ran(r.Outcome) {
		code := r.ExitCode
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
