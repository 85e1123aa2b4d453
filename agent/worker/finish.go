package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// finisher is the run → record → finish step: the diagnostic runs with
// its lease kept alive, its output is redacted and cut, and the final
// record is written with the hooks' writes (or kept in the backlog).
type finisher struct {
	store     state.TaskStore
	runner    Runner
	specs     map[string]spec
	redactor  *redact.Redactor
	uploadMax runner.Size // results.s3.max_size when uploading, else 0
	hooks     Hooks
	outcomes  *outcomeRecorder
	clock     clock.Clock
	log       *slog.Logger
	calls     *storeCalls
	leases    *leases
	msgs      *messages
	backlog   *recordBacklog
}

// runTask runs the diagnostic while keeping the lease alive; the queue's
// Hold keeps the message hidden.
func (f *finisher) runTask(ctx context.Context, j *job) runner.Result {
	t := j.task
	keep := f.leases.keepAlive(ctx, j)
	defer keep()
	// Read past the cap, so that record redacts before it cuts.
	run := j.spec.run
	run.MaxOutput += redact.CutSlack
	return f.runner.Run(ctx, run, j.spec.diag.Args(t.Host, t.ID, t.Params))
}

// record writes the run's result and ends the job.
func (f *finisher) record(j *job, rec state.TaskRecord, res runner.Result) {
	if res.Outcome == runner.Cancelled {
		f.msgs.handBack(j, back{why: backCancelled, detail: detailCancelled})
		return
	}
	// The one chokepoint: nothing below stores, logs or sends the output
	// unredacted, and what is kept is cut from redacted text.
	res.Output, res.Truncated = f.redactCut(res, j.spec.run.MaxOutput)
	rec.Outcome = res.Outcome
	rec.ExitCode = res.ExitCode
	rec.FinishedAt = f.clock.Now()
	// The upload takes the whole output and cuts res to max_output; the
	// record's string copy is made after it, of the cut output only.
	uspan := f.startUpload(j)
	f.hooks.Keep(&rec, &res, j.spec.diag)
	endUpload(uspan, rec)
	rec.Output = string(res.Output)
	rec.Truncated = res.Truncated
	f.outcomes.m.Duration.WithLabelValues(j.task.Diagnostic).Observe(res.Duration.Seconds())
	reason := ""
	if res.Err != nil {
		reason = res.Err.Error()
	}
	f.finish(j, rec, ended{outcome: res.Outcome, reason: reason, result: &res})
	f.msgs.ack(j)
}

// redactCut redacts a run's output (read up to redact.CutSlack past its
// cap) and cuts it to what is kept: the diagnostic's max_output (with its
// default), or results.s3.max_size when the uploader takes the whole
// output.
func (f *finisher) redactCut(res runner.Result, maxOutput runner.Size) ([]byte, bool) {
	limit := int(maxOutput)
	if f.uploadMax > 0 {
		limit = max(limit, int(f.uploadMax))
	}
	body := res.Output
	if res.Truncated {
		body = bytes.TrimSuffix(body, []byte(runner.TruncationMark))
	}
	out, cut := f.redactor.RedactCut(body, limit)
	if !res.Truncated && !cut {
		return out, false
	}
	return append(out[:len(out):len(out)], runner.TruncationMark...), true
}

// AuditRanOn is the audit entry field naming where a task ran, as
// "<instance id> (<hostname>)".
const AuditRanOn = "ran_on"

// finish writes a task's final record and ends j with e. The record, the
// outcome's audit entry, its notification and, for a run whose outcome is
// in report.on, its report job are one store call (one round trip to a
// standalone Redis); a record the store cannot take now is kept in the
// backlog with all of them and written when the store answers again.
func (f *finisher) finish(j *job, rec state.TaskRecord, e ended) {
	entry := f.outcomes.auditEntry(j, e)
	if rec.RanOn != nil {
		// The audit names the machine as the record does.
		if entry.Fields == nil {
			entry.Fields = map[string]string{}
		}
		entry.Fields[AuditRanOn] = rec.RanOn.String()
	}
	// What the run gives back to the limiter rides ahead of the record,
	// once: a finish kept to try again goes without it.
	x := state.FinishExtras{ID: state.NewFinishID(), Audit: &entry, Calls: j.limitDone}
	j.limitDone = nil
	x.Writes = append(x.Writes, f.hooks.Writes(rec, f.specs[rec.Diagnostic].diag, e.result)...)
	err := f.calls.storeCall(func(ctx context.Context) error { return f.store.Finish(ctx, rec, x) })
	switch {
	case err == nil:
	case errors.Is(err, state.ErrSuperseded):
		// The lease lapsed while the diagnostic ran and another agent
		// claimed the task: its attempt owns the record, its notification
		// and its report. This run still ends in its own outcome (log,
		// metric, audit).
		f.log.WarnContext(j.context(), "lease lapsed while running", "task_id", rec.ID, "attempt", rec.Attempts,
			"detail", "a later attempt owns the record; this result is logged only")
	case errors.Is(err, state.ErrPartial):
		f.calls.degraded("audit")
		f.log.WarnContext(j.context(), "task record written without its audit entry", "task_id", rec.ID, "err", err)
	default:
		f.calls.degraded("finish")
		f.log.WarnContext(j.context(), "recording the result failed; kept to be written when the state store answers",
			"task_id", rec.ID, "err", err)
		x.Calls = nil
		f.backlog.keepRecord(pendingFinish{rec: rec, extras: x})
	}
	f.outcomes.close(j, e)
}
