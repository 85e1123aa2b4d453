package agent

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestRejectedTasksStayOutOfRecentTasks: every id in recent_tasks is one
// GET /v1/tasks/{id} answers (the README's "ids for show"). A rejected
// task never had a record, so it is left out, whether its id is valid
// (bad;host's task) or fails validation itself (a space and a slash, a
// 70,000-character id); its WARN line quotes an invalid id escaped and
// cut to at most 200 bytes.
func TestRejectedTasksStayOutOfRecentTasks(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	ta := startAgentWith(t, testConfig, func(o *OpenOptions) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	long := strings.Repeat("x", 70_000)
	rejected := []string{
		`{"id":"rej-1","host":"bad;host","diagnostic":"echo"}`,
		`{"id":"bad;host","host":"a.example.com","diagnostic":"echo"}`,
		`{"id":"bad id/../x","host":"a.example.com","diagnostic":"echo"}`,
		`{"id":"rtl\u202eevil\u001b[2J","host":"a.example.com","diagnostic":"echo"}`,
		`{"id":"` + long + `","host":"a.example.com","diagnostic":"echo"}`,
	}
	for _, body := range rejected {
		if code, out := ta.post(t, body); code != http.StatusBadRequest {
			t.Fatalf("POST %.80s: %d %v; want 400", body, code, out)
		}
	}
	if code, out := ta.post(t, `{"id":"good-1","host":"a.example.com","diagnostic":"echo"}`); code != http.StatusAccepted {
		t.Fatalf("POST good-1: %d %v", code, out)
	}
	waitFor(t, "the outcomes", func() bool {
		return ta.outcome(outcome.Rejected) == int64(len(rejected)) && ta.outcome(outcome.Succeeded) == 1
	})
	_, body := ta.get(t, "/v1/status")
	var st admin.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.RecentTasks) != 1 || st.RecentTasks[0] != "good-1" {
		t.Errorf("recent_tasks = %.300q; want [good-1]: rejected tasks have no record to show", st.RecentTasks)
	}
	for _, id := range st.RecentTasks {
		if code, b := ta.get(t, "/v1/tasks/"+url.PathEscape(id)); code != http.StatusOK {
			t.Errorf("recent task %q: GET answered %d %s", id, code, b)
		}
	}

	var ids []string
	for _, line := range logs.lines("task ended") {
		if line["outcome"] != outcome.Rejected {
			continue
		}
		id, _ := line["task_id"].(string)
		ids = append(ids, id)
		if len(id) > 200 {
			t.Errorf("WARN task_id of %d bytes; want at most 200", len(id))
		}
		if strings.ContainsAny(id, "\u202e\u001b") {
			t.Errorf("WARN task_id %q holds a control character raw", id)
		}
	}
	want := []string{"rej-1", `"bad;host"`, `"bad id/../x"`, `"rtl\u202eevil\x1b[2J"`}
	for _, w := range want {
		if !strings.Contains(strings.Join(ids, "\n"), w) {
			t.Errorf("WARN task_ids %q; want %s among them", ids, w)
		}
	}
	if len(ids) != len(rejected) {
		t.Errorf("%d rejected WARN lines; want %d", len(ids), len(rejected))
	}
}
