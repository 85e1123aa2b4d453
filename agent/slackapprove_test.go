package agent

import (
	"net/http"
	"testing"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestSlackApproveRunsAParkedTask: Slack's Approve button, pressed by a
// user on intake.slack.approvers and signed with the signing secret,
// decides a parked task through the agent's approvals store (via slack),
// and the task runs with the Slack user named as its approver; a user not
// on the list is refused and decides nothing.
func TestSlackApproveRunsAParkedTask(t *testing.T) {
	h := startApprovalAgentWith(t, Deps{}, `
intake:
  addr: 127.0.0.1:0
  slack:
    signing_secret_env: SLACK_SIGNING_SECRET
    approvers: [U0ANA]
`)
	getenv := func(k string) (string, bool) { return "s3cret", k == "SLACK_SIGNING_SECRET" }
	ih, err := h.ma.AlertHandler(getenv)
	if err != nil {
		t.Fatal(err)
	}
	press := func(user, action, id string) (int, string) { return slackPress(t, ih, user, action, id) }
	h.post(t, "h1", "heapdump", "")
	h.waitFor(t, "h1", "parked", parked)
	if code, res := press("U0EVE", slackact.ActionApprove, "h1"); code != http.StatusForbidden {
		t.Fatalf("press by a user not on approvers: %d %s, want 403", code, res)
	}
	if v, _ := h.view(t, "h1"); !parked(v) {
		t.Fatalf("h1 is %s/%s after a refused press, want still awaiting_approval", v.Status, v.Outcome)
	}
	if code, res := press("U0ANA", slackact.ActionApprove, "h1"); code != http.StatusOK {
		t.Fatalf("approver's press: %d %s, want 200", code, res)
	}
	v := h.waitFor(t, "h1", "ended", ended)
	if v.Outcome != outcome.Succeeded {
		t.Fatalf("h1 ended %s (%s), want succeeded", v.Outcome, v.Reason)
	}
	if a := v.Approval; a == nil || a.Decision != taskview.ApprovalApproved || a.By != "slack:U0ANA" || a.Via != approval.ViaSlack {
		t.Fatalf("record's approval %+v, want approved by slack:U0ANA via slack", a)
	}
	if code, _ := press("U0ANA", slackact.ActionDeny, "h1"); code != http.StatusConflict {
		t.Fatalf("second press on a decided task: %d, want 409", code)
	}
}
