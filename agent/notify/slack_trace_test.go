package notify

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSlackMessageLinksTheTrace: a task with a trace link gets a context
// block linking it by its trace id, with the characters that would end a
// Slack link escaped; without a link the message is unchanged.
func TestSlackMessageLinksTheTrace(t *testing.T) {
	plain, _ := json.Marshal(SlackMessage(testEvent()))
	ev := testEvent()
	ev.Task.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ev.Task.TraceURL = "https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?a=<b>|c"
	withLink, _ := json.Marshal(SlackMessage(ev))
	want := "<https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?a=%3Cb%3E%7Cc|trace 4bf92f3577b34da6a3ce929d0e0e4736>"
	var msg SlackPayload
	if err := json.Unmarshal(withLink, &msg); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range msg.Blocks {
		for _, e := range b.Elements {
			if e.Text == want {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no trace link block %q in %s", want, withLink)
	}
	ev.Task.TraceURL = ""
	if noLink, _ := json.Marshal(SlackMessage(ev)); string(noLink) != string(plain) || strings.Contains(string(noLink), "trace ") {
		t.Errorf("without a link the message changed:\n%s\n%s", noLink, plain)
	}
}
