package state

import (
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// View is the record as it leaves the agent (GET /v1/tasks/{id},
// `autodiag show`, notification events): times in UTC, the exit code
// only when the diagnostic ran, and the trace's link made by link
// (tracing.Link; nil: none). It shares nothing the caller could change
// with the record.
func (r TaskRecord) View(link func(traceID string) string) taskview.Task {
	v := taskview.Task(r)
	v.ReceivedAt, v.StartedAt, v.FinishedAt = utc(r.ReceivedAt), utc(r.StartedAt), utc(r.FinishedAt)
	v.TraceURL = ""
	if link != nil {
		v.TraceURL = link(r.TraceID)
	}
	v.Alert, v.Approval, v.RanOn = clone(r.Alert), clone(r.Approval), clone(r.RanOn)
	v.ExitCode = nil
	if outcome.Ran(r.Outcome) {
		v.ExitCode = new(r.Exit())
	}
	return v
}

// Exit is the exit code, 0 where the record has none (it never ran): the
// value a record read as while its exit code was a plain int, which the
// evidence and the investigation tools still show.
func (r TaskRecord) Exit() int {
	if r.ExitCode == nil {
		return 0
	}
	return *r.ExitCode
}

// utc is t in UTC, the zero time left zero (omitzero leaves it out).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// clone is a copy of *p, nil for nil.
func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
