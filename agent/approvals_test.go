package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
)

// approvalConfig has one worker; heapdump needs a person's approval, and
// shares a daily quota of 1 per host with echo.
const approvalConfig = `
workers: 1
diagnostics:
  - name: sleep
    command: [/bin/sleep, "{param.secs}"]
    params: {secs: '[0-9]+(\.[0-9]+)?'}
    timeout: 1m
  - name: echo
    command: [/bin/echo, "{id}"]
    timeout: 10s
  - name: heapdump
    command: [/bin/echo, "heap of", "{id}"]
    timeout: 10s
    approval: required
    approval_timeout: 10m
limiter:
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$']
  rules:
    - name: heavy-quota
      match: {diagnostic: [heapdump, echo]}
      key: host
      limits: [{daily: 1}]
lifecycle:
  drain_timeout: 2m
`

// approvalHarness is a memory agent with its admin API served.
type approvalHarness struct {
	ma  *memAgent
	srv *httptest.Server
	reg *prometheus.Registry
}

func startApprovalAgent(t *testing.T, d Deps) *approvalHarness {
	t.Helper()
	return startApprovalAgentWith(t, d, "")
}

// startApprovalAgentWith is startApprovalAgent with more config appended.
func startApprovalAgentWith(t *testing.T, d Deps, extra string) *approvalHarness {
	t.Helper()
	cfg, err := config.Load([]byte(approvalConfig+extra), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &approvalHarness{reg: prometheus.NewRegistry()}
	d.InstanceID, d.Registry = "i-appr", h.reg
	var stop func()
	h.ma, stop = runMemAgent(t, cfg, d)
	h.srv = httptest.NewServer(h.ma.Handler())
	t.Cleanup(func() { h.srv.Close(); stop() })
	return h
}

func (h *approvalHarness) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *approvalHarness) post(t *testing.T, id, diag, params string) {
	t.Helper()
	body := `{"id":"` + id + `","host":"web-1.example.com","diagnostic":"` + diag + `"` + params + `}`
	if code, out := h.do(t, http.MethodPost, "/v1/tasks", body); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks %s: %d %s", id, code, out)
	}
}

// view is GET /v1/tasks/{id}; ok false on 404.
func (h *approvalHarness) view(t *testing.T, id string) (taskview.Task, bool) {
	t.Helper()
	code, out := h.do(t, http.MethodGet, "/v1/tasks/"+id, "")
	if code == http.StatusNotFound {
		return taskview.Task{}, false
	}
	var v taskview.Task
	if code != http.StatusOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("GET /v1/tasks/%s: %d %s", id, code, out)
	}
	return v, true
}

// waitFor polls GET /v1/tasks/{id} until ok holds, within 10 s.
func (h *approvalHarness) waitFor(t *testing.T, id, what string, ok func(taskview.Task) bool) taskview.Task {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, found := h.view(t, id)
		if found && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: not %s within 10s (last %+v)", id, what, v)
		}
		time.Sleep(10 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
}

func parked(v taskview.Task) bool { return v.Status == taskview.StatusAwaitingApproval }
func ended(v taskview.Task) bool  { return v.Outcome != "" }

func (h *approvalHarness) decide(t *testing.T, id, body string) (int, string) {
	t.Helper()
	return h.do(t, http.MethodPost, "/v1/approvals/"+id, body)
}

// auditOf is the newest audit entry of id with outcome o.
func (h *approvalHarness) auditOf(t *testing.T, id, o string) state.AuditEntry {
	t.Helper()
	entries, err := h.ma.store.RecentAudit(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.TaskID == id && e.Outcome == o {
			return e
		}
	}
	t.Fatalf("no audit entry of %s with outcome %s in %+v", id, o, entries)
	return state.AuditEntry{}
}

// A task of an approval: required diagnostic is parked, visible as
// awaiting_approval, and holds no worker: with the one worker slot, an
// ordinary task runs meanwhile. Approved through POST /v1/approvals, it
// runs, and its record, audit entry and metrics name the approver. Run
// with the parked tasks in memory and in a real Redis.
func TestApprovalParksHoldingNoWorkerThenRuns(t *testing.T) {
	for _, mode := range []string{"memory", "redis"} {
		t.Run(mode, func(t *testing.T) {
			d := Deps{}
			if mode == "redis" {
				d.Approvals = approval.NewRedis(testRedisApprovals(t), "t:"+randomID()+":")
			}
			h := startApprovalAgent(t, d)
			h.post(t, "h1", "heapdump", "")
			v := h.waitFor(t, "h1", "parked", parked)
			if v.Approval == nil || v.Approval.Deadline.Sub(v.Approval.RequestedAt) != 10*time.Minute {
				t.Fatalf("parked view %+v: want the approval's 10m deadline", v.Approval)
			}
			code, out := h.do(t, http.MethodGet, "/v1/approvals", "")
			if code != http.StatusOK || !strings.Contains(out, `"id": "h1"`) {
				t.Fatalf("GET /v1/approvals: %d %s, want h1 listed", code, out)
			}
			// The one worker slot is free: an ordinary task runs now.
			h.post(t, "s1", "sleep", `,"params":{"secs":"0"}`)
			if v := h.waitFor(t, "s1", "ended", ended); v.Outcome != outcome.Succeeded {
				t.Fatalf("s1 ended %s (%s) while h1 waited, want succeeded", v.Outcome, v.Reason)
			}
			if v, _ := h.view(t, "h1"); !parked(v) {
				t.Fatalf("h1 is %s/%s before any decision, want awaiting_approval", v.Status, v.Outcome)
			}
			if code, out := h.decide(t, "h1", `{"decision":"approve","by":"ana","reason":"heap needed for INC-7"}`); code != http.StatusOK {
				t.Fatalf("approve: %d %s", code, out)
			}
			v = h.waitFor(t, "h1", "ended", ended)
			if v.Outcome != outcome.Succeeded || !strings.Contains(v.Output, "heap of h1") {
				t.Fatalf("h1 ended %s (%s) output %q, want succeeded", v.Outcome, v.Reason, v.Output)
			}
			if a := v.Approval; a == nil || a.Decision != taskview.ApprovalApproved || a.By != "ana" || a.Via != approval.ViaAPI ||
				a.Reason != "heap needed for INC-7" || a.DecidedAt == nil {
				t.Fatalf("record's approval %+v, want approved by ana via api with the reason", a)
			}
			e := h.auditOf(t, "h1", outcome.Succeeded)
			if e.Fields["approval_by"] != "ana" || e.Fields["approval"] != taskview.ApprovalApproved || e.Fields["approval_via"] != approval.ViaAPI {
				t.Errorf("audit fields %v, want the approver", e.Fields)
			}
			h.auditOf(t, "h1", taskview.StatusAwaitingApproval)
			if got := approvalsTotal(t, h.reg, taskview.ApprovalApproved); got != 1 {
				t.Errorf("autodiag_approvals_total{result=approved} = %v, want 1", got)
			}
			// Decided: a second decision is 409, an unknown task 404.
			if code, out := h.decide(t, "h1", `{"decision":"deny","by":"bo"}`); code != http.StatusConflict || !strings.Contains(out, "already_decided") {
				t.Errorf("second decision: %d %s, want 409 already_decided", code, out)
			}
			if code, out := h.decide(t, "nope", `{"decision":"approve","by":"bo"}`); code != http.StatusNotFound {
				t.Errorf("unknown task: %d %s, want 404", code, out)
			}
		})
	}
}

// Denied: the task ends denied/approval_denied, once, naming who denied
// it; a malformed decision is 400 and changes nothing.
func TestApprovalDenied(t *testing.T) {
	h := startApprovalAgent(t, Deps{})
	h.post(t, "h2", "heapdump", "")
	h.waitFor(t, "h2", "parked", parked)
	for _, bad := range []string{`{"decision":"maybe","by":"bo"}`, `{"decision":"deny"}`, `not json`} {
		if code, out := h.decide(t, "h2", bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, out)
		}
	}
	if code, out := h.decide(t, "h2", `{"decision":"deny","by":"bo","reason":"not during peak"}`); code != http.StatusOK {
		t.Fatalf("deny: %d %s", code, out)
	}
	v := h.waitFor(t, "h2", "ended", ended)
	if v.Outcome != outcome.Denied || v.Reason != approval.ReasonDenied || v.Approval == nil || v.Approval.By != "bo" || v.RanOn != nil {
		t.Fatalf("h2 ended %s/%s approval %+v ran_on %v, want denied/approval_denied by bo, never run", v.Outcome, v.Reason, v.Approval, v.RanOn)
	}
	e := h.auditOf(t, "h2", outcome.Denied)
	if e.Reason != approval.ReasonDenied || e.Fields["approval_by"] != "bo" || e.Fields["approval_reason"] != "not during peak" {
		t.Errorf("audit %+v, want approval_denied by bo with the reason", e)
	}
	// The outcome is counted just after the record is written: wait for
	// it, then check it is counted once.
	deadline := time.Now().Add(10 * time.Second)
	for h.ma.worker.Outcomes()[outcome.Denied] == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
	if got := h.ma.worker.Outcomes()[outcome.Denied]; got != 1 {
		t.Errorf("denied outcomes = %d, want 1", got)
	}
	if got := testutil.ToFloat64(h.ma.m.outcomes.WithLabelValues("heapdump", outcome.Denied)); got != 1 {
		t.Errorf("autodiag_task_outcomes_total{heapdump,denied} = %v, want 1", got)
	}
}

// Unanswered: at the deadline (approval_timeout on the agent's clock) the
// sweep ends the task denied/approval_timeout; a second before it, the
// task still waits. A late decision is 409.
func TestApprovalTimeout(t *testing.T) {
	clk := clock.NewManual(time.Now())
	h := startApprovalAgent(t, Deps{Clock: clk})
	h.post(t, "h3", "heapdump", "")
	v := h.waitFor(t, "h3", "parked", parked)
	timeout := v.Approval.Deadline.Sub(v.Approval.RequestedAt)
	ctx := context.Background()
	clk.Add(timeout - time.Second)
	if err := h.ma.approvals.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.view(t, "h3"); !parked(v) {
		t.Fatalf("a second before the deadline h3 is %s/%s, want awaiting_approval", v.Status, v.Outcome)
	}
	clk.Add(time.Second)
	if err := h.ma.approvals.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	v = h.waitFor(t, "h3", "ended", ended)
	if v.Outcome != outcome.Denied || v.Reason != approval.ReasonTimeout || v.Approval == nil || v.Approval.Decision != taskview.ApprovalTimeout {
		t.Fatalf("h3 ended %s/%s approval %+v, want denied/approval_timeout", v.Outcome, v.Reason, v.Approval)
	}
	if code, out := h.decide(t, "h3", `{"decision":"approve","by":"ana"}`); code != http.StatusConflict {
		t.Errorf("late approval: %d %s, want 409", code, out)
	}
	if got := approvalsTotal(t, h.reg, taskview.ApprovalTimeout); got != 1 {
		t.Errorf("autodiag_approvals_total{result=timeout} = %v, want 1", got)
	}
}

// The limiter decides when the task is approved, not when it is asked:
// parked while the host's daily quota is free, then the quota spent by
// another task, the approved task ends rate_limited.
func TestApprovalLimiterDecidesAtApproval(t *testing.T) {
	h := startApprovalAgent(t, Deps{})
	h.post(t, "h4", "heapdump", "")
	h.waitFor(t, "h4", "parked", parked)
	h.post(t, "e4", "echo", "")
	if v := h.waitFor(t, "e4", "ended", ended); v.Outcome != outcome.Succeeded {
		t.Fatalf("e4 ended %s, want succeeded (the quota was free)", v.Outcome)
	}
	if code, out := h.decide(t, "h4", `{"decision":"approve","by":"ana"}`); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, out)
	}
	v := h.waitFor(t, "h4", "ended", ended)
	if v.Outcome != outcome.RateLimited || v.Approval == nil || v.Approval.By != "ana" {
		t.Fatalf("h4 ended %s (%s) approval %+v, want rate_limited, approved by ana", v.Outcome, v.Reason, v.Approval)
	}
}

// testRedisApprovals is a client on the test redis-server (testenv).
func testRedisApprovals(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// approvalsTotal is autodiag_approvals_total{result} as reg gathers it.
func approvalsTotal(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "autodiag_approvals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no autodiag_approvals_total{result=%q}", result)
	return 0
}
