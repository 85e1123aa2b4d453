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

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/state"
)

// TestFeedbackAPI: a verdict on a task's report is recorded once per
// person (a second one is 409 with the first), counted, its note
// redacted, and shows in the precision table; a task without a report
// or unknown, and a bad verdict, are refused.
func TestFeedbackAPI(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-fb", Registry: reg})
	defer stop()
	ctx := context.Background()
	for _, id := range []string{"t-rep", "t-norep"} {
		if _, err := ma.store.Claim(ctx, state.TaskRecord{ID: id, Host: "a.example.com", Diagnostic: "echo"}, "i-fb", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := ma.store.SetReport(ctx, "t-rep", json.RawMessage(`{"status":"ok","confidence":"likely","markdown":"m"}`)); !ok || err != nil {
		t.Fatalf("SetReport: %v %v", ok, err)
	}
	srv := httptest.NewServer(ma.Handler())
	defer srv.Close()
	post := func(id, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/tasks/"+id+"/feedback", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, id, body string
		code           int
		says           string
	}{
		{"first verdict", "t-rep", `{"verdict":"good","by":"ana","note":"DB_PASSWORD=hunter2hunter2 was the hint"}`, 201, `"verdict": "good"`},
		{"same person again", "t-rep", `{"verdict":"wrong","by":"ana"}`, 409, `"reason": "already_recorded"`},
		{"another person", "t-rep", `{"verdict":"wrong","by":"bo"}`, 201, `"verdict": "wrong"`},
		{"no report", "t-norep", `{"verdict":"good","by":"ana"}`, 409, `"no_report"`},
		{"unknown task", "t-none", `{"verdict":"good","by":"ana"}`, 404, `"not_found"`},
		{"bad verdict", "t-rep", `{"verdict":"meh","by":"cy"}`, 400, `"invalid_feedback"`},
		{"not JSON", "t-rep", `verdict=good`, 400, `"malformed_json"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.id, tc.body)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Fatalf("%d %s, want %d …%s…", code, body, tc.code, tc.says)
			}
			if strings.Contains(body, "hunter2") {
				t.Fatalf("the note's secret came back: %s", body)
			}
		})
	}
	for v, want := range map[string]float64{feedback.Good: 1, feedback.Wrong: 1} {
		if got := feedbackTotal(t, reg, v); got != want {
			t.Errorf("autodiag_report_feedback_total{verdict=%q} = %v, want %v", v, got, want)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/reports/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Verdicts int            `json:"verdicts"`
		Rows     []feedback.Row `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	want := feedback.Row{Diagnostic: "echo", Confidence: "likely", Good: 1, Wrong: 1, Precision: 0.5}
	if st.Verdicts != 2 || len(st.Rows) != 1 || st.Rows[0] != want {
		t.Fatalf("stats %+v, want 2 verdicts in %+v", st, want)
	}
}

// feedbackTotal is autodiag_report_feedback_total{verdict} as reg
// gathers it.
func feedbackTotal(t *testing.T, reg *prometheus.Registry, verdict string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "autodiag_report_feedback_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == verdict {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no autodiag_report_feedback_total{verdict=%q}", verdict)
	return 0
}
