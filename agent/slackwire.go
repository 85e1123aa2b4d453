package agent

import (
	"context"
	"errors"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/slackact"
)

// slackApprover lets Slack's Approve and Deny buttons decide through the
// approvals store: the button's press is a Decision via slack, and the
// store's errors become the ones the Slack handler answers with.
type slackApprover struct{ a *approval.Approvals }

func (s slackApprover) Decide(ctx context.Context, taskID string, approve bool, by, reason string) error {
	err := s.a.Decide(ctx, taskID, approval.Decision{Approve: approve, By: by, Reason: reason, Via: approval.ViaSlack})
	switch {
	case errors.Is(err, approval.ErrUnknown):
		return errors.Join(slackact.ErrNotFound, err)
	case errors.Is(err, approval.ErrDecided):
		return errors.Join(slackact.ErrAlreadyDecided, err)
	}
	return err
}

// slackApproverOf is nil (Slack answers "approvals are not configured")
// when the agent has no approvals store.
func slackApproverOf(a *approval.Approvals) slackact.Approver {
	if a == nil {
		return nil
	}
	return slackApprover{a}
}
