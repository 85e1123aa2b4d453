// Package taskview is the one view of a task that leaves the agent: the
// record as GET /v1/tasks/{id}, `autodiag show`, notification events and
// reports' events carry it. Its JSON is the README's contract. The stored
// record (state.TaskRecord) makes it (TaskRecord.View); the message that
// asks for a task is task.Task.
//
// It imports nothing of autodiag, so that state, notify, report and the
// commands can all use it.
package taskview

import (
	"encoding/json"
	"time"
)

// Task is a task as GET /v1/tasks/{id} and `autodiag show --json` show
// it; a notification event carries it with the output cut to an excerpt
// (notify.Excerpt), a report's event with the report. state.TaskRecord.View
// makes one from a stored record.
type Task struct {
	ID         string            `json:"id"`
	Host       string            `json:"host"`
	Diagnostic string            `json:"diagnostic"`
	Params     map[string]string `json:"params,omitempty"`
	Severity   string            `json:"severity,omitempty"`
	Alert      *Alert            `json:"alert,omitempty"`
	// Origin, Parent, Investigation and Step place an investigation's
	// tool call in its tree; empty for other tasks.
	Origin        string     `json:"origin,omitempty"`
	Parent        string     `json:"parent,omitempty"`
	Investigation string     `json:"investigation,omitempty"`
	Step          int        `json:"step,omitempty"`
	Status        string     `json:"status,omitempty"`
	Outcome       string     `json:"outcome"`
	Reason        string     `json:"reason,omitempty"`
	Attempts      int        `json:"attempts"`
	Owner         string     `json:"owner,omitempty"`
	ReceivedAt    *time.Time `json:"received_at,omitempty"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	ExitCode      *int       `json:"exit_code,omitempty"`
	Output        string     `json:"output"`
	Truncated     bool       `json:"truncated"`
	OutputURL     string     `json:"output_url,omitempty"`
	// OutputUpload is "failed" when the upload to results.s3 failed.
	OutputUpload string          `json:"output_upload,omitempty"`
	Limiter      json.RawMessage `json:"limiter,omitempty"`
	Report       json.RawMessage `json:"report"`
	// TraceID and SpanID name the task's trace (see docs/tracing.md);
	// TraceURL is tracing.link_template filled with the trace id.
	TraceID  string `json:"trace_id,omitempty"`
	SpanID   string `json:"span_id,omitempty"`
	TraceURL string `json:"trace_url,omitempty"`
}

// Alert is the alert a task came from.
type Alert struct {
	Source  string `json:"source,omitempty"`
	Name    string `json:"name,omitempty"`
	EventID string `json:"event_id,omitempty"`
	// Labels, Annotations, StartsAt and Route are the alert's context
	// (bounded, redacted); Investigate "always" is the route's ask for a
	// report whatever the outcome.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"starts_at,omitzero"`
	Route       string            `json:"route,omitempty"`
	Investigate string            `json:"investigate,omitempty"`
}
