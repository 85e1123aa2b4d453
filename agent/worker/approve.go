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
