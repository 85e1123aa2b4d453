package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

// TestApprovalCommands: `approve` and `deny` post the decision, via cli,
// to the agent's admin API; a decision without anyone deciding is a usage
// error before any call; the agent's 409 is the command's error.
func TestApprovalCommands(t *testing.T) {
	t.Setenv("AUTODIAG_CONFIG", "")
	t.Setenv("USER", "")
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/t-done") {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"approval: already decided: approved by ana","reason":"already_decided"}`))
			return
		}
		_, _ = w.Write([]byte(`{"task_id":"t-1"}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) error {
		var out, errb bytes.Buffer
		root := newRoot(&out, &errb)
		root.SetArgs(args)
		return root.Execute()
	}
	if err := run("approve", "t-1", "--by", "ana", "--reason", "INC-7", "--admin-addr", addr); err != nil {
		t.Fatal(err)
	}
	if err := run("deny", "t-1", "--by", "bo", "--admin-addr", addr); err != nil {
		t.Fatal(err)
	}
	want := []string{`POST /v1/approvals/t-1 {"by":"ana","decision":"approve","reason":"INC-7","via":"cli"}`,
		`POST /v1/approvals/t-1 {"by":"bo","decision":"deny","reason":"","via":"cli"}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ue usageError
	if err := run("approve", "t-1", "--admin-addr", addr); err == nil || !errors.As(err, &ue) || len(got) != 2 {
		t.Fatalf("no --by and no $USER: %v, %d requests; want a usage error and none", err, len(got))
	}
	if err := run("approve", "t-done", "--by", "ana", "--admin-addr", addr); err == nil || !strings.Contains(err.Error(), "already decided") {
		t.Fatalf("decided task: %v, want the agent's 409", err)
	}
}

// TestShowApproval: `autodiag show` names who decided a task's approval,
// via what and why, and the deadline of one that waits.
func TestShowApproval(t *testing.T) {
	at := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printTask(&b, taskview.Task{ID: "t-1", Status: taskview.StatusAwaitingApproval, Approval: &taskview.Approval{Deadline: at}})
	printTask(&b, taskview.Task{ID: "t-2", Outcome: "denied", Reason: "approval_denied",
		Approval: &taskview.Approval{Decision: taskview.ApprovalDenied, By: "bo", Via: "cli", Reason: "peak hours", DecidedAt: &at}})
	out := b.String()
	for _, want := range []string{"task t-1: awaiting_approval", "awaiting, until 2026-12-05T06:00:00Z",
		"task t-2: denied (approval_denied)", "denied by bo via cli at 2026-12-05T06:00:00Z: peak hours"} {
		if !strings.Contains(out, want) {
			t.Errorf("show printed:\n%s\nwant %q", out, want)
		}
	}
}
