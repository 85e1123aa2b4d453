package hooks

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
)

// Options are what the hooks are built from.
type Options struct {
	Config config.Config
	Store  state.TaskStore
	// Redactor is the one chokepoint every output passes (NewRedactor),
	// shared with the worker; nil = New builds one.
	Redactor *redact.Redactor
	// Outbox holds notifications until a sink took them; nil = in memory.
	Outbox notify.Outbox
	// LookupEnv reads the sinks' url_env and secret_env; nil = an empty
	// environment.
	LookupEnv func(string) (string, bool)
	// S3 takes the full outputs of results.s3; needed when
	// results.s3.bucket is set.
	S3 S3API
	// Reports are the report provider, queue and limiter backend; needed
	// with report.enabled (OpenReportParts).
	Reports *ReportParts
	// Tasks is how an investigation's tool call becomes a task on the
	// agent's own queue: the one way in POST /v1/tasks takes too
	// (worker.Submitter). Validator signs the call's origin and answers
	// which hosts a tool may name.
	Tasks      Submitter
	Validator  *task.Validator
	InstanceID string
	Clock      clock.Clock
	Logger     *slog.Logger
	Registry   prometheus.Registerer
	// Base is what uploads derive their bounds from; it ends on a fast
	// exit.
	Base context.Context
	// TaskEnded is told of every task record the store wrote as ended,
	// after it (the alert task index of resolutions); nil = nobody.
	TaskEnded func(ctx context.Context, rec state.TaskRecord)
	// ReportWritten is told of every record whose report was just
	// written, before its `report` event, and returns it as it is then (a
	// report written after its alert resolved gets resolved_at); nil =
	// nobody.
	ReportWritten func(ctx context.Context, rec state.TaskRecord) state.TaskRecord
}

// Submitter validates a task and sends it onto the queue, or ends it as
// rejected and returns its *task.Error (worker.Submitter).
type Submitter interface {
	Submit(ctx context.Context, t task.Task) (task.Task, error)
}

// Hooks are what happens around a task's end and a drain: the redactor
// every output passes, the upload of the whole output (results.s3), the
// notification (notify) and the root-cause report (report). Each part is
// nil when off, and its methods then do nothing.
type Hooks struct {
	redactor *redact.Redactor
	uploader *uploader
	notifier *notifier
	reports  *reports
	// lifecycle gives the completion result a drain_* event carries.
	lifecycle lifecycle.Config
	taskEnded func(ctx context.Context, rec state.TaskRecord)
}

// New builds the hooks cfg configures.
func New(o Options) (*Hooks, error) {
	h := &Hooks{lifecycle: o.Config.Lifecycle, taskEnded: o.TaskEnded}
	b := builder{h: h}
	if err := b.wireResults(o); err != nil {
		return nil, err
	}
	if err := b.wireReports(o); err != nil {
		return nil, err
	}
	return h, nil
}

// builder makes the hooks' parts in New, one wire step per part (results
// and upload, reports and investigations); each sets the part it made on
// h, and a part left nil is off.
type builder struct{ h *Hooks }

// Redactor is the one chokepoint every output passes.
func (h *Hooks) Redactor() *redact.Redactor { return h.redactor }

// UploadMax is results.s3.max_size when the whole output of each run is
// uploaded, else 0.
func (h *Hooks) UploadMax() runner.Size {
	if h.uploader == nil {
		return 0
	}
	return h.uploader.cfg.MaxSize
}

// RunNotify runs the notification dispatcher until the drain stops it
// (DrainEnded); nil at once without sinks.
func (h *Hooks) RunNotify(ctx context.Context) error {
	if h.notifier == nil {
		return nil
	}
	return h.notifier.d.Run(ctx)
}

// RunReports runs the report workers until the drain stops them
// (DrainEnded); hard ends on a fast exit, which abandons the reports in
// progress (they stay queued).
func (h *Hooks) RunReports(ctx, hard context.Context) error { return h.reports.run(ctx, hard) }

// Keep uploads the whole output of a run (worker.Hooks).
func (h *Hooks) Keep(rec *state.TaskRecord, res *runner.Result, d runner.Diagnostic) {
	h.uploader.keep(rec, res, d)
}

// Writes are the notification and the report job of a task's final
// record (worker.Hooks).
func (h *Hooks) Writes(rec state.TaskRecord, d runner.Diagnostic, res *runner.Result) []state.Write {
	w := h.notifier.writes(rec)
	if h.taskEnded != nil && rec.Alert != nil {
		// A copy of its own: a closure over rec would move every record,
		// alert or not, to the heap.
		ended := rec
		w = append(w, state.Write{Apply: func(ctx context.Context) { h.taskEnded(ctx, ended) }})
	}
	if res != nil {
		w = append(w, h.reports.writes(rec, d, *res)...)
	}
	return w
}

// Resolved writes the `resolved` event of a task whose alert resolved
// (resolution.Recorder's Notify).
func (h *Hooks) Resolved(rec state.TaskRecord) {
	if h.notifier == nil {
		return
	}
	h.notifier.resolved(rec)
}

// resolved writes the resolved event of rec's alert.
func (n *notifier) resolved(rec state.TaskRecord) {
	v := rec.View(tracing.Link)
	n.enqueue(notify.Event{Type: notify.EventResolved, Task: &v}, "task_id", rec.ID)
}

// ApprovalRequested writes the approval_requested event of a task parked
// for a person's approval (approval.Options.Requested).
func (h *Hooks) ApprovalRequested(v taskview.Task) {
	if h.notifier == nil {
		return
	}
	h.notifier.enqueue(notify.Event{Type: notify.EventApprovalRequested, Task: &v}, "task_id", v.ID)
}

// DrainStarted tells the notifier and the reports (supervisor.Hooks).
func (h *Hooks) DrainStarted(p drain.Progress) {
	h.notifier.drainStarted(p)
	h.reports.drainStarted()
}

// DrainEnded enqueues the drain's end and stops the dispatcher and the
// reports within the drain deadline (supervisor.Hooks).
func (h *Hooks) DrainEnded(ctx context.Context, p drain.Progress, action *lifecycle.Action, timedOut bool) {
	h.notifier.drainEnded(ctx, p, drainResult(h.lifecycle, action, timedOut))
	h.reports.drainEnded(ctx, p.Deadline)
}

// CompletionFailed enqueues drain_failed (supervisor.Hooks).
func (h *Hooks) CompletionFailed(p drain.Progress) { h.notifier.completionFailed(p) }
