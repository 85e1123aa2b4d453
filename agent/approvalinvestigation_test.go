package agent

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/investigate/eval"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// approvalInvestigationConfig: one worker; the alerting diagnostic fails
// and is investigated; the one tool, heapdump, needs a person's approval
// within 2m, well inside the investigation's wall time (so that the
// approval's own timeout, not the investigation's, ends an unanswered
// call). Slack's interactivity is on the intake, U0ANA the one approver.
const approvalInvestigationConfig = `
workers: 1
queue: {visibility_timeout: 1m}
diagnostics:
  - {name: check, command: [/bin/sh, -c, 'echo "java heap space"; exit 1'], timeout: 10s}
  - {name: echo, command: [/bin/echo, "{id}"], timeout: 10s}
  - name: heapdump
    command: [/bin/echo, "heap of", "{id}"]
    timeout: 10s
    investigate: true
    description: "Dump the JVM heap histogram."
    approval: required
    approval_timeout: 2m
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
report: {enabled: true, provider: openai, base_url: 'http://127.0.0.1:1/v1', api_key_env: SCENARIO_KEY, model: m,
  timeout: 120s, on: [failed], workers: 2, investigate: {max_steps: 2, wall_time: 10m}}
intake:
  addr: 127.0.0.1:0
  slack:
    signing_secret_env: SLACK_SIGNING_SECRET
    approvers: [U0ANA]
lifecycle: {drain_timeout: 1m}
`

// heapdumpModel is a scripted model: its first turn of every
// investigation asks for heapdump on the alert's host, and it answers
// once the call has a result (whatever it was).
type heapdumpModel struct {
	mu    sync.Mutex
	calls int
}

func (*heapdumpModel) Name() string { return "scripted" }

func (m *heapdumpModel) Complete(_ context.Context, req report.Request) (report.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := report.Response{InputTokens: 1000, OutputTokens: 100, FinishReason: "end_turn"}
	asked := slices.ContainsFunc(req.Messages, func(msg report.Message) bool { return len(msg.ToolCalls) > 0 })
	if len(req.Tools) > 0 && !asked {
		m.calls++
		r.ToolCalls = []report.ToolCall{{ID: "c1", Name: "heapdump", Input: json.RawMessage(`{}`)}}
		r.FinishReason = "tool_use"
		return r, nil
	}
	r.Text = eval.Ans{Cause: "The JVM ran out of heap.", Category: "resource_saturation", Confidence: "inconclusive"}.JSON()
	return r, nil
}

// signedPress is a Slack block_actions press of action on task id by
// user, stamped ts and signed with secret, served by h: the status code.
func signedPress(t *testing.T, h http.Handler, secret string, ts time.Time, user, action, id string) int {
	t.Helper()
	js := `{"type":"block_actions","user":{"id":"` + user + `"},"actions":[{"action_id":"` + action + `","value":"` + id + `"}]}`
	body := url.Values{"payload": {js}}.Encode()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, slackact.Path, strings.NewReader(body))
	stamp := strconv.FormatInt(ts.Unix(), 10)
	r.Header.Set("X-Slack-Request-Timestamp", stamp)
	r.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(slackact.Sign(secret, stamp, []byte(body))))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// counterOf is the counter name{labels} as reg gathers it (0 when none).
func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// waitParked is the one task of an investigation of parent that awaits
// approval, as GET /v1/approvals lists it, within 20 s.
func (h *approvalHarness) waitParked(t *testing.T, parent string) taskview.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out := h.do(t, http.MethodGet, "/v1/approvals", "")
		var list struct {
			Approvals []taskview.Task `json:"approvals"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("GET /v1/approvals: %d %s", code, out)
		}
		for _, v := range list.Approvals {
			if v.Parent == parent && v.Investigation != "" && parked(v) {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool call of %s's investigation awaits approval within 20s (listed %s)", parent, out)
		}
		time.Sleep(10 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
}

// TestApprovalInvestigationE2E is the approvals' end to end: a scripted
// investigation (the real agent, its worker, limiter, records, Slack
// listener, and the parked tasks in a real Redis) asks for heapdump,
// which needs a person's approval.
//
//   - The tool call's task waits awaiting_approval holding no worker: with
//     the one worker slot, another task runs meanwhile.
//   - Slack presses with a bad signature, a timestamp older than Slack's
//     window, and by a user not on intake.slack.approvers are refused,
//     each counted in autodiag_slack_interactions_total, and decide
//     nothing.
//   - A signed press by the approver approves it: it runs, its record
//     names the approver, and its output is the investigation's evidence.
//   - A second investigation's call, unanswered, still waits a second
//     before its deadline (approval_timeout on the agent's fake clock);
//     once the deadline passes the agent's own sweep, every
//     approval.SweepEvery on its ticker, ends it denied/approval_timeout
//     (waited for within 3 sweeps), a Gap of the report.
func TestApprovalInvestigationE2E(t *testing.T) {
	clk := clock.NewManual(time.Now())
	h := startInvestigationApprovals(t, approvalInvestigationConfig, clk)
	const secret = "s3cret"
	getenv := func(k string) (string, bool) { return secret, k == "SLACK_SIGNING_SECRET" }
	ih, err := h.ma.AlertHandler(getenv)
	if err != nil {
		t.Fatal(err)
	}
	interactions := func(action, result string) float64 {
		return counterOf(t, h.reg, "autodiag_slack_interactions_total", map[string]string{"action": action, "result": result})
	}

	// Approved.
	h.post(t, "p1", "check", "")
	tool := h.waitParked(t, "p1")
	if tool.Diagnostic != "heapdump" || tool.Host != "web-1.example.com" || tool.Origin != "investigation" {
		t.Fatalf("parked tool call %+v, want heapdump on the alert's host, origin investigation", tool)
	}
	h.post(t, "e1", "echo", "")
	if v := h.waitFor(t, "e1", "ended", ended); v.Outcome != outcome.Succeeded {
		t.Fatalf("e1 ended %s (%s) while the tool call waited, want succeeded (the one worker is free)", v.Outcome, v.Reason)
	}
	refusals := []struct {
		name, secret, user, result string
		ts                         time.Time
		code                       int
		action                     string
	}{
		{"bad signature", "not-the-secret", "U0ANA", slackact.ResultBadSignature, clk.Now(), http.StatusUnauthorized, "none"},
		{"old timestamp", secret, "U0ANA", slackact.ResultStale, clk.Now().Add(-slackact.Window - time.Second), http.StatusUnauthorized, "none"},
		{"not an approver", secret, "U0EVE", slackact.ResultNotAllowed, clk.Now(), http.StatusForbidden, slackact.ActionApprove},
	}
	for _, r := range refusals {
		before := interactions(r.action, r.result)
		if code := signedPress(t, ih, r.secret, r.ts, r.user, slackact.ActionApprove, tool.ID); code != r.code {
			t.Errorf("%s: %d, want %d", r.name, code, r.code)
		}
		if got := interactions(r.action, r.result); got != before+1 {
			t.Errorf("%s: autodiag_slack_interactions_total{action=%s,result=%s} = %v, want %v", r.name, r.action, r.result, got, before+1)
		}
		if v, _ := h.view(t, tool.ID); !parked(v) {
			t.Fatalf("%s: %s is %s/%s, want still awaiting_approval", r.name, tool.ID, v.Status, v.Outcome)
		}
	}
	if code := signedPress(t, ih, secret, clk.Now(), "U0ANA", slackact.ActionApprove, tool.ID); code != http.StatusOK {
		t.Fatalf("approver's press: %d, want 200", code)
	}
	if got := interactions(slackact.ActionApprove, slackact.ResultApproved); got != 1 {
		t.Errorf("autodiag_slack_interactions_total{approve,approved} = %v, want 1", got)
	}
	v := h.waitFor(t, tool.ID, "ended", ended)
	if v.Outcome != outcome.Succeeded || !strings.Contains(v.Output, "heap of "+tool.ID) {
		t.Fatalf("%s ended %s (%s) output %q, want succeeded", tool.ID, v.Outcome, v.Reason, v.Output)
	}
	if a := v.Approval; a == nil || a.Decision != taskview.ApprovalApproved || a.By != "slack:U0ANA" || a.Via != approval.ViaSlack || a.DecidedAt == nil {
		t.Fatalf("record's approval %+v, want approved by slack:U0ANA via slack", a)
	}
	if e := h.auditOf(t, tool.ID, outcome.Succeeded); e.Fields["approval_by"] != "slack:U0ANA" {
		t.Errorf("audit fields %v, want the approver", e.Fields)
	}
	_, res := h.ma.waitReport(t, "p1", 20*time.Second)
	if c, ok := toolCall(res, tool.ID); !ok || c.Result != "ran" || c.Outcome != outcome.Succeeded {
		t.Fatalf("p1's investigation: call of %s %+v (found %v), want ran; record %+v", tool.ID, c, ok, res.Investigation)
	}
	if gaps := res.Investigation.Gaps; len(gaps) != 0 {
		t.Errorf("p1's gaps %+v, want none", gaps)
	}

	// Unanswered: the approval's timeout ends it, a Gap. On another host,
	// so that the investigation does not reuse p1's fresh heapdump
	// (report.investigate.reuse_within).
	if code, out := h.do(t, http.MethodPost, "/v1/tasks", `{"id":"p2","host":"web-2.example.com","diagnostic":"check"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks p2: %d %s", code, out)
	}
	tool2 := h.waitParked(t, "p2")
	timeout := tool2.Approval.Deadline.Sub(tool2.Approval.RequestedAt)
	if timeout != 2*time.Minute {
		t.Fatalf("parked with a %s deadline, want heapdump's approval_timeout 2m", timeout)
	}
	clk.Add(timeout - time.Second)
	if err := h.ma.approvals.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.view(t, tool2.ID); !parked(v) {
		t.Fatalf("a second before its deadline %s is %s/%s, want awaiting_approval", tool2.ID, v.Status, v.Outcome)
	}
	clk.Add(time.Second)
	v = h.waitForWithin(t, tool2.ID, "ended", ended, 3*approval.SweepEvery)
	if v.Outcome != outcome.Denied || v.Reason != approval.ReasonTimeout || v.RanOn != nil {
		t.Fatalf("%s ended %s/%s ran_on %v, want denied/approval_timeout, never run", tool2.ID, v.Outcome, v.Reason, v.RanOn)
	}
	_, res = h.ma.waitReport(t, "p2", 20*time.Second)
	want := []report.Gap{{Tool: "heapdump", Host: "web-2.example.com", Result: outcome.Denied, Reason: approval.ReasonTimeout}}
	if got := res.Investigation.Gaps; !slices.Equal(got, want) {
		t.Fatalf("p2's gaps %+v, want %+v", got, want)
	}
	if got := approvalsTotal(t, h.reg, taskview.ApprovalTimeout); got != 1 {
		t.Errorf("autodiag_approvals_total{result=timeout} = %v, want 1", got)
	}
}

// startInvestigationApprovals runs an agent of yaml with the scripted
// heapdumpModel, its parked tasks in the test Redis, its admin API served.
func startInvestigationApprovals(t *testing.T, yaml string, clk clock.Clock) *approvalHarness {
	t.Helper()
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &approvalHarness{reg: prometheus.NewRegistry()}
	d := Deps{InstanceID: "i-appr", Registry: h.reg, Clock: clk, Reports: &hooks.ReportParts{Provider: &heapdumpModel{}},
		Approvals: approval.NewRedis(testRedisApprovals(t), "t:"+randomID()+":")}
	var stop func()
	h.ma, stop = runMemAgent(t, cfg, d)
	h.srv = httptest.NewServer(h.ma.Handler())
	t.Cleanup(func() { h.srv.Close(); stop() })
	return h
}

// TestApprovalPendingAtWallTime: an investigation whose wall_time ends
// while its tool call still awaits approval (approval_timeout 2m, wall
// time 3s) records the call as a Gap awaiting_approval with reason
// approval_pending, not a generic error; the task stays parked and,
// approved later, still runs.
func TestApprovalPendingAtWallTime(t *testing.T) {
	yaml := strings.Replace(approvalInvestigationConfig, "wall_time: 10m", "wall_time: 3s", 1)
	h := startInvestigationApprovals(t, yaml, nil)
	h.post(t, "p3", "check", "")
	tool := h.waitParked(t, "p3")
	_, res := h.ma.waitReport(t, "p3", 20*time.Second)
	gaps := res.Investigation.Gaps
	if len(gaps) != 1 || gaps[0].Tool != "heapdump" || gaps[0].Result != investigate.ResultAwaitingApproval ||
		!strings.HasPrefix(gaps[0].Reason, investigate.ReasonApprovalPending+":") || !strings.Contains(gaps[0].Reason, tool.ID) {
		t.Fatalf("p3's gaps %+v, want heapdump awaiting_approval, reason approval_pending naming %s", gaps, tool.ID)
	}
	if res.Investigation.EndedBy != "wall_time" {
		t.Errorf("ended by %q, want wall_time", res.Investigation.EndedBy)
	}
	if v, _ := h.view(t, tool.ID); !parked(v) {
		t.Fatalf("%s is %s/%s after the investigation ended, want still awaiting_approval", tool.ID, v.Status, v.Outcome)
	}
	if code, out := h.decide(t, tool.ID, `{"decision":"approve","by":"ana"}`); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, out)
	}
	if v := h.waitFor(t, tool.ID, "ended", ended); v.Outcome != outcome.Succeeded {
		t.Fatalf("%s approved after its investigation ended: %s (%s), want succeeded", tool.ID, v.Outcome, v.Reason)
	}
}

// waitForWithin polls GET /v1/tasks/{id} until ok holds, within d.
func (h *approvalHarness) waitForWithin(t *testing.T, id, what string, ok func(taskview.Task) bool, d time.Duration) taskview.Task {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		v, found := h.view(t, id)
		if found && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: not %s within %s (last %+v)", id, what, d, v)
		}
		time.Sleep(10 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
}

// toolCall is the call of task id in res's investigation.
func toolCall(res report.Result, id string) (report.Call, bool) {
	if res.Investigation == nil {
		return report.Call{}, false
	}
	for _, st := range res.Investigation.Steps {
		for _, c := range st.Calls {
			if c.TaskID == id {
				return c, true
			}
		}
	}
	return report.Call{}, false
}
