package worker

import (
	"context"
	"time"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
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
