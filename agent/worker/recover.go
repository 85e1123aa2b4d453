package worker

import (
	"context"
	"fmt"

	"github.com/autodiag/autodiag/agent/internal/detached"
	"github.com/autodiag/autodiag/agent/state"
)

// Recover reconciles the in-flight entries this instance left
// in a previous life: a task still running under this instance has its
// record marked interrupted (the next delivery of its message runs it
// again); a task whose record already has an outcome is left as it is.
// Every entry is removed and audited, and the log says what happens next.
func (w *Worker) Recover(ctx context.Context) {
	var entries []state.InflightEntry
	err := detached.Call(ctx, w.storeTimeout, func(ctx context.Context) (err error) {
		entries, err = w.store.Inflight(ctx, w.instanceID)
		return err
	})
	if err != nil {
		w.log.Warn("list in-flight tasks of the previous process", "err", err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.TaskID)
	}
	// The entries as they are, including those of tasks that ended (a
	// store that derives them from the records lists the same ids).
	err = detached.Call(ctx, w.storeTimeout, func(ctx context.Context) (err error) {
		ids, err = w.store.InflightIDs(ctx, w.instanceID)
		return err
	})
	if err != nil {
		w.log.Warn("list in-flight entries of the previous process", "err", err)
	}
	var recs []state.TaskRecord
	err = detached.Call(ctx, w.storeTimeout, func(ctx context.Context) (err error) {
		recs, err = w.store.Recover(ctx, w.instanceID)
		return err
	})
	if err != nil {
		w.log.Warn("recover in-flight tasks", "err", err)
		return
	}
	marked := map[string]bool{}
	for _, r := range recs {
		marked[r.ID] = true
		w.log.Warn("task interrupted", "task_id", r.ID, "host", r.Host, "diagnostic", r.Diagnostic, "attempts", r.Attempts,
			"detail", fmt.Sprintf("left running by this instance's previous process; its record is marked interrupted. "+
				"If its message was not deleted, SQS delivers it again once its visibility timeout lapses and it runs as attempt %d; "+
				"if it was deleted, nothing runs it again", r.Attempts+1))
		w.auditRecovery(ctx, state.AuditEntry{TaskID: r.ID, Host: r.Host, Diagnostic: r.Diagnostic, Outcome: state.StatusInterrupted,
			Reason: "left running by this instance's previous process"})
	}
	for _, id := range ids {
		if !marked[id] {
			w.reconcileEntry(ctx, id)
		}
	}
}

// RecoveredOutcome is the audit outcome of an in-flight entry removed at
// start whose task was not running under this instance any more.
const RecoveredOutcome = "reconciled"

// reconcileEntry logs and audits the removed in-flight entry of a task
// that was not running under this instance any more; its record is left
// alone.
func (w *Worker) reconcileEntry(ctx context.Context, id string) {
	var rec state.TaskRecord
	var found bool
	err := detached.Call(ctx, w.storeTimeout, func(ctx context.Context) (err error) {
		rec, found, err = w.store.Task(ctx, id)
		return err
	})
	var detail, reason string
	switch {
	case err != nil:
		reason = "record unreadable"
		detail = "its record could not be read and is left as it is"
	case !found:
		reason = "no record"
		detail = "its record has expired; if its message was not deleted, SQS delivers it again and it runs as a new task"
	case rec.Status == state.StatusDone:
		reason = "already ended " + rec.Outcome
		detail = "the task had already ended (" + rec.Outcome + "); its record is left as it is and nothing runs it again"
	default:
		reason = "owned by a later attempt"
		detail = "a later attempt owns the task (" + rec.Status + " under " + rec.Owner + "); its record is left as it is"
	}
	attrs := []any{"task_id", id, "host", rec.Host, "diagnostic", rec.Diagnostic, "outcome", rec.Outcome, "detail", detail}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	w.log.Info("in-flight entry of the previous process removed", attrs...)
	w.auditRecovery(ctx, state.AuditEntry{TaskID: id, Host: rec.Host, Diagnostic: rec.Diagnostic, Outcome: RecoveredOutcome, Reason: reason})
}

// auditRecovery appends a recovery's audit entry, on a call detached from
// ctx like the recovery's other store calls.
func (w *Worker) auditRecovery(ctx context.Context, e state.AuditEntry) {
	e.InstanceID, e.Time = w.instanceID, w.clock.Now()
	if err := detached.Call(ctx, w.storeTimeout, func(ctx context.Context) error { return w.store.Audit(ctx, e) }); err != nil {
		logStoreErr(w.log, err)
	}
}
