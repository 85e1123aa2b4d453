package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/fake/writebackfake"
)

// button is a Block Kit button as Slack reads it.
type button struct {
	Type     string `json:"type"`
	ActionID string `json:"action_id"`
	Value    string `json:"value"`
	Style    string `json:"style"`
	Text     struct {
		Type, Text string
	} `json:"text"`
	Confirm *json.RawMessage `json:"confirm"`
}

// actionsOf are the buttons of the actions blocks of a posted message.
func actionsOf(t *testing.T, raw json.RawMessage) []button {
	t.Helper()
	var blocks []struct {
		Type     string          `json:"type"`
		BlockID  string          `json:"block_id"`
		Elements json.RawMessage `json:"elements"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("blocks: %v: %s", err, raw)
	}
	var out []button
	for _, b := range blocks {
		if b.Type != "actions" {
			continue
		}
		if b.BlockID == "" {
			t.Fatalf("an actions block without block_id: %s", raw)
		}
		var bs []button
		if err := json.Unmarshal(b.Elements, &bs); err != nil {
			t.Fatal(err)
		}
		out = append(out, bs...)
	}
	return out
}

// The bot's report message carries 👍/👎 buttons with the task id; a
// result message carries none; an approval request carries Approve
// (confirmed) and Deny with the task id, and names the diagnostic, the
// host and the deadline, as Block Kit JSON at chat.postMessage.
func TestSlackBotPostsButtons(t *testing.T) {
	sl := writebackfake.NewSlack(t, "xoxb-"+wbToken, "C0123")
	s := wbSink(t, SinkConfig{Name: "slack", Type: TypeSlack, URL: sl.URL, BotTokenEnv: "SLACK_BOT", Channel: "C0123"}, NewMemoryThreads(nil))
	ctx := context.Background()
	if err := s.Send(ctx, deliveryOf(t, alertEvent(EventSucceeded, "t-run", "", nil))); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, deliveryOf(t, wbReport("t-rep", nil, 100))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Date(2026, 12, 5, 6, 15, 0, 0, time.UTC)
	approval := alertEvent(eventApprovalRequested, "t-heap", "", &taskview.Alert{Source: "alertmanager", Name: "JVMHeapHigh", EventID: "e1"})
	approval.Task.Diagnostic = "heap_dump"
	body, _ := json.Marshal(approval)
	// The task view of an approval request carries approval.deadline.
	body = []byte(strings.Replace(string(body), `"task":{`, `"task":{"approval":{"requested_at":"2026-12-05T06:00:00Z","deadline":"`+deadline.Format(time.RFC3339)+`"},`, 1))
	if err := s.Send(ctx, Delivery{Entry: Entry{ID: approval.ID, Event: approval.Type, Body: body}, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	m := sl.Messages()
	if len(m) != 3 {
		t.Fatalf("%d messages, want 3", len(m))
	}
	if b := actionsOf(t, m[0].Blocks); len(b) != 0 {
		t.Fatalf("a result message has buttons: %+v", b)
	}
	fb := actionsOf(t, m[1].Blocks)
	if len(fb) != 2 || fb[0].ActionID != "feedback_good" || fb[1].ActionID != "feedback_wrong" ||
		fb[0].Value != "t-rep" || fb[1].Value != "t-rep" || fb[0].Type != "button" || fb[0].Text.Type != "plain_text" ||
		!strings.Contains(fb[0].Text.Text, "👍") || !strings.Contains(fb[1].Text.Text, "👎") {
		t.Fatalf("report buttons %+v", fb)
	}
	ap := actionsOf(t, m[2].Blocks)
	if len(ap) != 2 || ap[0].ActionID != "approve" || ap[1].ActionID != "deny" || ap[0].Value != "t-heap" || ap[1].Value != "t-heap" ||
		ap[0].Style != "primary" || ap[1].Style != "danger" || ap[0].Confirm == nil {
		t.Fatalf("approval buttons %+v", ap)
	}
	var all any
	_ = json.Unmarshal(m[2].Blocks, &all)
	text := fmt.Sprint(all)
	for _, want := range []string{"heap_dump", "web-05.example.com", "t-heap", "JVMHeapHigh",
		"<!date^" + strconv.FormatInt(deadline.Unix(), 10) + "^", "2026-12-05T06:15:00Z"} {
		if !strings.Contains(text, want) {
			t.Fatalf("approval message lacks %q: %s", want, text)
		}
	}
	if !strings.Contains(m[2].Text, "approval requested") {
		t.Fatalf("fallback text %q", m[2].Text)
	}
}
