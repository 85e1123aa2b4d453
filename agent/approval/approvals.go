package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
)

// The reasons of a task that ends `denied`.
const (
	ReasonDenied  = "approval_denied"
	ReasonTimeout = "approval_timeout"
)

// The channels a decision comes through (Decision.Via).
const (
	ViaAPI   = "api"
	ViaCLI   = "cli"
	ViaSlack = "slack"
)

const (
	// SweepEvery is how often Run sweeps: an unanswered task ends at most
	// this long after its deadline.
	SweepEvery = 5 * time.Second
	// SendLease is how long a sweep that took a due task has to send it
	// on before another sweep may take it again.
	SendLease = 30 * time.Second
	// sweepBatch bounds the due tasks one sweep takes.
	sweepBatch = 100
	// MaxList bounds the tasks Waiting lists.
	MaxList = 1000
	// maxBy and maxReason bound a decision's fields (bytes).
	maxBy     = 128
	maxReason = 1024
)

// ErrInvalid: the decision is malformed (the error says why).
var ErrInvalid = errors.New("approval: invalid decision")

// Decision is a person's answer to a parked task.
type Decision struct {
	Approve bool
	// By names who decided (a user name, a Slack user); required.
	By string
	// Reason is why, free text (redacted before it is kept).
	Reason string
	// Via is the channel: ViaAPI, ViaCLI or ViaSlack.
	Via string
}

// Validate says what is wrong with d.
func (d Decision) Validate() error {
	switch {
	case strings.TrimSpace(d.By) == "":
		return fmt.Errorf("%w: by is required (who decides)", ErrInvalid)
	case len(d.By) > maxBy:
		return fmt.Errorf("%w: by is longer than %d bytes", ErrInvalid, maxBy)
	case strings.ContainsFunc(d.By, unicode.IsControl):
		return fmt.Errorf("%w: by holds a control character", ErrInvalid)
	case len(d.Reason) > maxReason:
		return fmt.Errorf("%w: reason is longer than %d bytes", ErrInvalid, maxReason)
	}
	switch d.Via {
	case ViaAPI, ViaCLI, ViaSlack:
		return nil
	}
	return fmt.Errorf("%w: via must be %s, %s or %s, not %q", ErrInvalid, ViaAPI, ViaCLI, ViaSlack, d.Via)
}

// Options are what Approvals needs.
type Options struct {
	Store Store
	// Send puts a task's message body on the task queue.
	Send func(ctx context.Context, body []byte) error
	// Requested is told each newly parked task (the outbox's
	// approval_requested event); nil = nobody.
	Requested func(v taskview.Task)
	// Redact redacts a decision's reason; nil = kept as given.
	Redact func(string) string
	Clock  clock.Clock
	Log    *slog.Logger
	// Timeout bounds each store call (redis.timeout); at least 1s.
	Timeout  time.Duration
	Registry prometheus.Registerer
}

// Approvals parks the tasks that need a person's approval and sends them
// on once decided (see the package's doc).
type Approvals struct {
	o       Options
	total   *prometheus.CounterVec
	pending prometheus.Gauge
}

// New registers the approvals' metrics and returns the approvals.
func New(o Options) (*Approvals, error) {
	if o.Store == nil || o.Send == nil {
		return nil, errors.New("approval: Store and Send are required")
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Timeout = max(o.Timeout, time.Second)
	a := &Approvals{o: o,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_approvals_total",
			Help: "Approval decisions on parked tasks, by result: approved, denied, timeout (unanswered within approval_timeout)."}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autodiag_approvals_pending",
			Help: "Tasks parked for approval and not decided yet, fleet-wide, as this agent last counted them (at its sweep, park or decision)."}),
	}
	for _, r := range []string{taskview.ApprovalApproved, taskview.ApprovalDenied, taskview.ApprovalTimeout} {
		a.total.WithLabelValues(r)
	}
	if o.Registry != nil {
		for _, c := range []prometheus.Collector{a.total, a.pending} {
			if err := o.Registry.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// call bounds one store call by the store timeout.
func (a *Approvals) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	return f(ctx)
}

// Gate is the worker's question for a task of a diagnostic with approval:
// required, whose message body is body: the decision when one was made
// (approved: run it; else end it denied); nil when the task is parked now
// or was already, and the message may be acknowledged (the store holds
// the task). An error means neither: the message must come back.
func (a *Approvals) Gate(ctx context.Context, t task.Task, body []byte, timeout time.Duration) (*taskview.Approval, error) {
	var p Parked
	var found bool
	if err := a.call(ctx, func(ctx context.Context) (err error) { p, found, err = a.o.Store.Get(ctx, t.ID); return err }); err != nil {
		return nil, err
	}
	if found {
		return decided(p), nil
	}
	now := a.o.Clock.Now().UTC()
	p = Parked{TaskID: t.ID, Diagnostic: t.Diagnostic, Host: t.Host, Origin: t.Origin, Params: t.Params,
		Investigation: t.Investigation, Parent: t.Parent, Body: body,
		Approval: taskview.Approval{RequestedAt: now, Deadline: now.Add(timeout)}}
	var isNew bool
	if err := a.call(ctx, func(ctx context.Context) (err error) { p, isNew, err = a.o.Store.Park(ctx, p); return err }); err != nil {
		return nil, err
	}
	if !isNew {
		return decided(p), nil
	}
	a.recount(ctx)
	a.o.Log.InfoContext(ctx, "task awaits approval", "task_id", t.ID, "host", t.Host, "diagnostic", t.Diagnostic,
		"origin", t.Origin, "deadline", p.Approval.Deadline)
	if a.o.Requested != nil {
		a.o.Requested(p.View())
	}
	return nil, nil
}

// decided is p's decision, nil while it waits.
func decided(p Parked) *taskview.Approval {
	if p.Approval.Decision == "" {
		return nil
	}
	ap := p.Approval
	return &ap
}

// View is the parked task as GET /v1/tasks/{id} shows it.
func (p Parked) View() taskview.Task {
	ap := p.Approval
	v := taskview.Task{ID: p.TaskID, Host: p.Host, Diagnostic: p.Diagnostic, Params: p.Params, Origin: p.Origin,
		Investigation: p.Investigation, Parent: p.Parent, Status: taskview.StatusAwaitingApproval, Approval: &ap}
	if ap.Decision != "" {
		// Decided and on its way back through the queue.
		v.Status = "decided"
	}
	return v
}

// Decide records a person's decision on a parked task and sends it on
// through the queue, where the worker runs it (the limiter deciding
// then) or ends it denied. ErrUnknown: no such task awaits approval;
// ErrDecided: it was decided before (or its deadline passed: it is
// decided timeout now); ErrInvalid: d is malformed. A decision whose send
// fails stands: the sweep sends it on.
func (a *Approvals) Decide(ctx context.Context, taskID string, d Decision) error {
	if err := d.Validate(); err != nil {
		return err
	}
	ctx, span := tracing.Start(ctx, "approval decide", trace.SpanKindInternal, tracing.KeyTaskID.String(taskID))
	defer span.End()
	var p Parked
	var found bool
	if err := a.call(ctx, func(ctx context.Context) (err error) { p, found, err = a.o.Store.Get(ctx, taskID); return err }); err != nil {
		tracing.Fail(span, err)
		return err
	}
	if !found {
		return ErrUnknown
	}
	if p.Approval.Decision != "" {
		return fmt.Errorf("%w: %s by %s", ErrDecided, p.Approval.Decision, p.Approval.By)
	}
	now := a.o.Clock.Now().UTC()
	if !now.Before(p.Approval.Deadline) {
		a.expire(ctx, p, now)
		return fmt.Errorf("%w: unanswered by its deadline %s", ErrDecided, p.Approval.Deadline.Format(time.RFC3339))
	}
	reason := d.Reason
	if a.o.Redact != nil {
		reason = a.o.Redact(reason)
	}
	ap := taskview.Approval{Decision: taskview.ApprovalDenied, By: d.By, Reason: reason, Via: d.Via, DecidedAt: &now}
	if d.Approve {
		ap.Decision = taskview.ApprovalApproved
	}
	span.SetAttributes(Attributes(&ap)...)
	var old taskview.Approval
	err := a.call(ctx, func(ctx context.Context) (err error) { old, err = a.o.Store.Decide(ctx, taskID, ap, now); return err })
	switch {
	case errors.Is(err, ErrDecided):
		return fmt.Errorf("%w: %s by %s", ErrDecided, old.Decision, old.By)
	case err != nil:
		tracing.Fail(span, err)
		return err
	}
	a.total.WithLabelValues(ap.Decision).Inc()
	a.recount(ctx)
	a.o.Log.InfoContext(ctx, "approval decided", "task_id", taskID, "diagnostic", p.Diagnostic, "host", p.Host,
		"decision", ap.Decision, "by", ap.By, "reason", ap.Reason, "via", ap.Via)
	a.sendOn(ctx, p)
	return nil
}

// Attributes are the span attributes of a decision.
func Attributes(ap *taskview.Approval) []attribute.KeyValue {
	return []attribute.KeyValue{tracing.KeyApproval.String(ap.Decision), tracing.KeyApprovalBy.String(ap.By),
		tracing.KeyApprovalReason.String(ap.Reason), tracing.KeyApprovalVia.String(ap.Via)}
}

// expire decides p timeout at now, unless someone decided it first.
func (a *Approvals) expire(ctx context.Context, p Parked, now time.Time) {
	ap := taskview.Approval{Decision: taskview.ApprovalTimeout, By: "autodiag",
		Reason: "unanswered within approval_timeout", DecidedAt: &now}
	err := a.call(ctx, func(ctx context.Context) (err error) { _, err = a.o.Store.Decide(ctx, p.TaskID, ap, now); return err })
	switch {
	case errors.Is(err, ErrDecided):
	case err != nil:
		a.o.Log.WarnContext(ctx, "approval timeout not recorded; the next sweep tries again", "task_id", p.TaskID, "err", err)
		return
	default:
		a.total.WithLabelValues(taskview.ApprovalTimeout).Inc()
		a.recount(ctx)
		a.o.Log.InfoContext(ctx, "approval timed out", "task_id", p.TaskID, "diagnostic", p.Diagnostic, "host", p.Host,
			"deadline", p.Approval.Deadline)
	}
	a.sendOn(ctx, p)
}

// sendOn puts a decided task's message back on the queue and takes it
// off the due set; a failure is logged, and a later sweep sends it.
func (a *Approvals) sendOn(ctx context.Context, p Parked) {
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	err := a.o.Send(sctx, p.Body)
	cancel()
	if err != nil {
		a.o.Log.WarnContext(ctx, "decided task not sent on; a later sweep sends it", "task_id", p.TaskID, "err", err)
		return
	}
	if err := a.call(ctx, func(ctx context.Context) error { return a.o.Store.Sent(ctx, p.TaskID) }); err != nil {
		// Sent again by a later sweep: the worker ends a duplicate.
		a.o.Log.WarnContext(ctx, "decided task sent on but still due; a later sweep sends it again", "task_id", p.TaskID, "err", err)
	}
}

// sendTimeout bounds one send to the queue (the SQS client retries
// within it).
const sendTimeout = 30 * time.Second

// Sweep ends the tasks unanswered at their deadline (decided timeout)
// and sends on the decided ones not sent yet, then counts what waits.
func (a *Approvals) Sweep(ctx context.Context) error {
	now := a.o.Clock.Now().UTC()
	var ids []string
	if err := a.call(ctx, func(ctx context.Context) (err error) {
		ids, err = a.o.Store.Due(ctx, now, SendLease, sweepBatch)
		return err
	}); err != nil {
		return err
	}
	for _, id := range ids {
		var p Parked
		var found bool
		if err := a.call(ctx, func(ctx context.Context) (err error) { p, found, err = a.o.Store.Get(ctx, id); return err }); err != nil {
			a.o.Log.WarnContext(ctx, "parked task not read; the next sweep tries again", "task_id", id, "err", err)
			continue
		}
		switch {
		case !found:
			_ = a.call(ctx, func(ctx context.Context) error { return a.o.Store.Sent(ctx, id) })
		case p.Approval.Decision != "":
			a.sendOn(ctx, p)
		case !now.Before(p.Approval.Deadline):
			a.expire(ctx, p, now)
		}
	}
	var n int64
	if err := a.call(ctx, func(ctx context.Context) (err error) { n, err = a.o.Store.Pending(ctx, now); return err }); err != nil {
		return err
	}
	a.pending.Set(float64(n))
	return nil
}

// recount sets the pending gauge from the store, after this agent parked
// or decided a task: the gauge is always a count, never moved by
// increments that another agent's decisions would make drift. A failed
// count leaves it to the next sweep.
func (a *Approvals) recount(ctx context.Context) {
	var n int64
	if err := a.call(ctx, func(ctx context.Context) (err error) {
		n, err = a.o.Store.Pending(ctx, a.o.Clock.Now().UTC())
		return err
	}); err != nil {
		a.o.Log.DebugContext(ctx, "approvals pending not counted; the next sweep counts them", "err", err)
		return
	}
	a.pending.Set(float64(n))
}

// Run sweeps every SweepEvery until ctx ends.
func (a *Approvals) Run(ctx context.Context) {
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	for {
		if err := a.Sweep(ctx); err != nil && ctx.Err() == nil {
			a.o.Log.WarnContext(ctx, "approval sweep failed; the next one tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Waiting lists the parked tasks not sent on yet (at most MaxList),
// earliest due first, as views.
func (a *Approvals) Waiting(ctx context.Context) ([]taskview.Task, error) {
	var ids []string
	if err := a.call(ctx, func(ctx context.Context) (err error) { ids, err = a.o.Store.Waiting(ctx, MaxList); return err }); err != nil {
		return nil, err
	}
	out := make([]taskview.Task, 0, len(ids))
	for _, id := range ids {
		var p Parked
		var found bool
		if err := a.call(ctx, func(ctx context.Context) (err error) { p, found, err = a.o.Store.Get(ctx, id); return err }); err != nil {
			return nil, err
		}
		if found {
			out = append(out, p.View())
		}
	}
	return out, nil
}

// Lookup is the view of a parked task; false when none is parked under
// id.
func (a *Approvals) Lookup(ctx context.Context, id string) (taskview.Task, bool, error) {
	var p Parked
	var found bool
	err := a.call(ctx, func(ctx context.Context) (err error) { p, found, err = a.o.Store.Get(ctx, id); return err })
	if err != nil || !found {
		return taskview.Task{}, false, err
	}
	return p.View(), true, nil
}
