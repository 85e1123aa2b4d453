package agent

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/state"
)

// TestAgentIntakeSlackFeedback: the agent's intake serves Slack's
// interactivity: a signed 👍 records the person's verdict in the agent's
// feedback store (report-stats reads it) and counts it in
// autodiag_report_feedback_total and autodiag_slack_interactions_total;
// the same person's second press is a duplicate.
func TestAgentIntakeSlackFeedback(t *testing.T) {
	ta := startAgent(t, testConfig+`
intake:
  addr: 127.0.0.1:0
  slack:
    signing_secret_env: SLACK_SIGNING_SECRET
`)
	getenv := func(k string) (string, bool) { return "s3cret", k == "SLACK_SIGNING_SECRET" }
	h, err := ta.AlertHandler(getenv)
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: time.Now().UTC()})
	if _, err := ta.d.Store.Claim(t.Context(), state.TaskRecord{ID: "t-slack", Host: "web-01", Diagnostic: "echo"}, "i", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.d.Store.SetReport(t.Context(), "t-slack", rep); err != nil {
		t.Fatal(err)
	}
	press := func() (int, string) { return slackPress(t, h, "U0ALICE", slackact.ActionFeedbackGood, "t-slack") }
	if code, res := press(); code != http.StatusOK || res != slackact.ResultRecorded {
		t.Fatalf("first press: %d %s", code, res)
	}
	if code, res := press(); code != http.StatusOK || res != slackact.ResultDuplicate {
		t.Fatalf("second press: %d %s", code, res)
	}
	log, err := ta.feedback.Store().Log(t.Context())
	if err != nil || len(log) != 1 || log[0].By != "slack:U0ALICE" || log[0].Verdict != "good" {
		t.Fatalf("verdicts %+v %v", log, err)
	}
	if n := labelled(t, ta.Agent, "autodiag_report_feedback_total", map[string]string{"verdict": "good"}); n != 1 {
		t.Fatalf("autodiag_report_feedback_total{verdict=good} = %v, want 1", n)
	}
	if n := labelled(t, ta.Agent, "autodiag_slack_interactions_total", map[string]string{"action": "feedback_good", "result": "duplicate"}); n != 1 {
		t.Fatalf("autodiag_slack_interactions_total{feedback_good,duplicate} = %v, want 1", n)
	}
}

// slackPress is a block_actions press of action on task id by user, signed
// with the tests' signing secret "s3cret" and served by h: the status and
// the answer's result.
func slackPress(t *testing.T, h http.Handler, user, action, id string) (int, string) {
	t.Helper()
	js := `{"type":"block_actions","user":{"id":"` + user + `"},"actions":[{"action_id":"` + action + `","value":"` + id + `"}]}`
	body := url.Values{"payload": {js}}.Encode()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, slackact.Path, strings.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	r.Header.Set("X-Slack-Request-Timestamp", ts)
	r.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(slackact.Sign("s3cret", ts, []byte(body))))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var ans map[string]string
	_ = json.Unmarshal(w.Body.Bytes(), &ans)
	return w.Code, ans["result"]
}

// labelled is the value of the counter name{want} in a's registry.
func labelled(t *testing.T, a *Agent, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
