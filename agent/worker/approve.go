package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/outcome"
)

// Approvals is the gate of the diagnostics that need a person's approval
// (catalog `approval: required`); *approval.Approvals is the real one.
// Gate returns the decision when one was made, nil when the task is
// parked (its body stored, the message may be acknowledged), or an error
// when neither (the message must come back).
type Approvals interface {
	Gate(ctx context.Context, t task.Task, body []byte, timeout time.Duration) (*taskview.Approval, error)
}

var _ Approvals = (*approval.Approvals)(nil)

// gateTimeout bounds the gate's store calls (each bounded by
// redis.timeout on its own).
const gateTimeout = 30 * time.Second

// AuditAwaitingApproval is the audit entry's outcome field of a task
// parked for approval (not an outcome: the task ends later).
const AuditAwaitingApproval = taskview.StatusAwaitingApproval

// approve is the approval gate, after validate and before placement and
// the worker slot: true when the job is done here, parked for a person's
// decision (the message acknowledged once the store holds the task, so it
// holds no worker, receive slot or concurrency slot while it waits) or
// handed back because the store did not answer. A decided task goes on
// with its decision in j.approval: approved, it runs the normal path and
// the limiter decides now; denied, execute ends it after the claim.
func (p *pipeline) approve(j *job) bool {
	if p.approvals == nil {
		return false
	}
	d := j.spec.run
	if d.Approval != runner.ApprovalRequired {
		return false
	}
	ctx, span := tracing.Start(j.context(), "approval", trace.SpanKindInternal)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, gateTimeout)
	ap, err := p.approvals.Gate(ctx, j.task, j.msg.Body, d.ApprovalTimeout)
	cancel()
	t := j.task
	switch {
	case err != nil:
		tracing.Fail(span, err)
		p.calls.degraded("approval")
		delay := retryDelay(j.msg.ReceiveCount)
		p.log.WarnContext(j.context(), "approval store unavailable; task handed back", "task_id", t.ID, "retry_after", delay.Seconds(), "err", err)
		p.msgs.handBack(j, back{why: backRetry, after: delay})
		return true
	case ap == nil:
		p.log.InfoContext(j.context(), "task parked for approval", "task_id", t.ID, "host", t.Host, "diagnostic", t.Diagnostic, "origin", t.Origin)
		p.outcomes.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: AuditAwaitingApproval})
		p.outcomes.drop(j)
		p.msgs.ack(j)
		return true
	}
	attrs := approval.Attributes(ap)
	span.SetAttributes(attrs...)
	j.span.SetAttributes(attrs...)
	j.mu.Lock()
	j.approval = ap
	j.mu.Unlock()
	return false
}

// denied ends a task whose approval was refused or not given in time,
// after its claim: outcome denied with its record, audit entry and
// notification; false when the task may run.
func (p *pipeline) denied(j *job, rec state.TaskRecord) bool {
	ap := j.approval
	if ap == nil || ap.Approved() {
		return false
	}
	reason, detail := approval.ReasonDenied, "denied by "+ap.By+" via "+ap.Via
	if ap.Decision == taskview.ApprovalTimeout {
		reason, detail = approval.ReasonTimeout, "unanswered within approval_timeout"
	}
	if ap.Reason != "" && ap.Decision != taskview.ApprovalTimeout {
		detail += ": " + ap.Reason
	}
	rec.Outcome, rec.Reason, rec.FinishedAt = outcome.Denied, reason, p.clock.Now()
	p.fin.finish(j, rec, ended{outcome: outcome.Denied, reason: reason, detail: detail})
	p.msgs.ack(j)
	return true
}

// approvalFields are the audit fields of a decision: who, what, when,
// why and via what.
func approvalFields(ap *taskview.Approval, fields map[string]string) map[string]string {
	if ap == nil {
		return fields
	}
	if fields == nil {
		fields = map[string]string{}
	}
	fields["approval"], fields["approval_by"], fields["approval_via"] = ap.Decision, ap.By, ap.Via
	if ap.Reason != "" {
		fields["approval_reason"] = ap.Reason
	}
	if ap.DecidedAt != nil {
		fields["approval_at"] = ap.DecidedAt.UTC().Format(time.RFC3339)
	}
	return fields
}
