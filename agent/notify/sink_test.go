package notify

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func testEvent() Event {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	end := start.Add(1500 * time.Millisecond)
	code := 1
	return Event{Type: EventFailed, ID: "3f2a9c0d8e7b6a5f4e3d2c1b0a998877", InstanceID: "i-0123456789abcdef0", Time: end,
		Task: &taskview.Task{ID: "t-42", Host: "web-1.example.com", Diagnostic: "disk-usage", Params: map[string]string{"mount": "/var"},
			Severity: "critical", Alert: &taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "ev-9"},
			Status: "finished", Outcome: "failed", Attempts: 1, Owner: "i-0123456789abcdef0",
			RanOn:     &taskview.RanOn{InstanceID: "i-0123456789abcdef0", Hostname: "ip-10-0-1-17"},
			StartedAt: start, FinishedAt: end, ExitCode: &code,
			Output: "Filesystem Size Used Avail Use% Mounted on\n/dev/nvme0n1p1 8.0G 8.0G 0 100% /var\n<html> & ``` fences\n"}}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n%s", path, got)
	}
}

func TestWebhookPayloadAndSignature(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	w := &Webhook{httpSink: httpSink{name: "hook", url: rcv.URL, client: NewHTTPClient(), timeout: time.Second}, secret: []byte("k3y")}
	body, err := json.MarshalIndent(testEvent(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "webhook.json", append(body, '\n'))
	ev := testEvent()
	d := Delivery{Entry: Entry{ID: ev.ID, Sink: "hook", Event: ev.Type, Body: body}, Attempt: 1}
	if err := w.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	r := rcv.requests()[0]
	if got := r.header.Get(HeaderDelivery); got != ev.ID {
		t.Errorf("%s = %q", HeaderDelivery, got)
	}
	if got := r.header.Get(HeaderEvent); got != "failed" {
		t.Errorf("%s = %q", HeaderEvent, got)
	}
	if !Verify([]byte("k3y"), r.body, r.header.Get(HeaderSignature)) {
		t.Errorf("signature %q does not verify", r.header.Get(HeaderSignature))
	}
	if Verify([]byte("other"), r.body, r.header.Get(HeaderSignature)) {
		t.Error("signature verifies under another key")
	}
}

// The V1 signature covers the time of each attempt with the body: a
// retry is signed anew, a replay past the tolerance, a changed body or
// time, or another key are refused.
func TestWebhookSignatureV1RefusesReplays(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	clock := newFakeClock()
	key := []byte("k3y")
	w := &Webhook{httpSink: httpSink{name: "hook", url: rcv.URL, client: NewHTTPClient(), timeout: time.Second}, secret: key, clock: clock}
	body := []byte(`{"event":"failed","delivery_id":"d-1"}`)
	d := Delivery{Entry: Entry{ID: "d-1", Sink: "hook", Event: EventFailed, Body: body}, Attempt: 1}
	for range 2 {
		if err := w.Send(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Minute)
	}
	reqs := rcv.requests()
	first, second := reqs[0].header.Get(HeaderSignatureV1), reqs[1].header.Get(HeaderSignatureV1)
	if first == second {
		t.Errorf("two attempts a minute apart carry the same V1 signature %q", first)
	}
	if want := fmt.Sprintf("t=%d,", newFakeClock().Now().Unix()); !strings.HasPrefix(first, want) {
		t.Errorf("V1 signature %q, want it to start %q", first, want)
	}
	sent := newFakeClock().Now()
	tamperedTime := strings.Replace(first, fmt.Sprint(sent.Unix()), fmt.Sprint(sent.Unix()+3600), 1)
	for _, tt := range []struct {
		name   string
		key    []byte
		body   []byte
		header string
		at     time.Time
		want   error
	}{
		{"fresh", key, body, first, sent.Add(time.Second), nil},
		{"at the tolerance", key, body, first, sent.Add(DefaultSignatureTolerance), nil},
		{"replayed past the tolerance", key, body, first, sent.Add(DefaultSignatureTolerance + time.Second), ErrSignatureExpired},
		{"another body", key, []byte(`{"event":"succeeded"}`), first, sent, ErrSignatureInvalid},
		{"another key", []byte("other"), body, first, sent, ErrSignatureInvalid},
		{"time moved forward", key, body, tamperedTime, sent.Add(time.Hour), ErrSignatureInvalid},
		{"no v1", key, body, "t=1", sent, ErrSignatureInvalid},
		{"empty", key, body, "", sent, ErrSignatureInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := VerifyV1(tt.key, tt.body, tt.header, tt.at, 0); !errors.Is(err, tt.want) {
				t.Errorf("VerifyV1 = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSendClassifiesAnswers(t *testing.T) {
	tests := []struct {
		name       string
		code       int
		retryAfter string
		permanent  bool
		after      time.Duration
	}{
		{"ok", 200, "", false, 0},
		{"accepted", 202, "", false, 0},
		{"server error", 500, "", false, 0},
		{"request timeout", 408, "", false, 0},
		{"too many", 429, "7", false, 7 * time.Second},
		{"unavailable with a date", 503, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), false, time.Hour},
		{"bad request", 400, "", true, 0},
		{"gone", 410, "", true, 0},
		{"redirect is not followed", 302, "", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rcv := newReceiver(t, tt.code)
			if tt.retryAfter != "" {
				rcv.header.Set("Retry-After", tt.retryAfter)
			}
			rcv.header.Set("Location", "https://elsewhere.example/")
			w := &Webhook{httpSink: httpSink{name: "hook", url: rcv.URL, client: NewHTTPClient(), timeout: time.Second}}
			err := w.Send(context.Background(), Delivery{Entry: Entry{ID: "x", Body: []byte("{}")}})
			if tt.code < 300 {
				if err != nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			var se *SendError
			if !errors.As(err, &se) || se.Status != tt.code || se.Permanent != tt.permanent {
				t.Fatalf("got %#v", err)
			}
			if se.RetryAfter < tt.after-2*time.Second || se.RetryAfter > tt.after {
				t.Errorf("RetryAfter = %s, want about %s", se.RetryAfter, tt.after)
			}
		})
	}
}

func TestSendErrorHidesTheURL(t *testing.T) {
	rcv := newReceiver(t)
	rcv.Close()
	w := &Webhook{httpSink: httpSink{name: "hook", url: rcv.URL + "/SECRETPATH", client: NewHTTPClient(), timeout: time.Second}}
	err := w.Send(context.Background(), Delivery{Entry: Entry{ID: "x", Body: []byte("{}")}})
	if err == nil || strings.Contains(err.Error(), "SECRETPATH") {
		t.Fatalf("got %v", err)
	}
}

func TestSlackMessage(t *testing.T) {
	msg, err := json.MarshalIndent(SlackMessage(testEvent()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "slack.json", append(msg, '\n'))

	drain := Event{Type: EventDrainFailed, ID: "d1", InstanceID: "i-0123456789abcdef0",
		Drain: &Drain{Source: "sqs", Reason: "Terminating:Wait", StartedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			Deadline: time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC), Result: "deadline", TimedOut: true}}
	msg, err = json.MarshalIndent(SlackMessage(drain), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "slack_drain.json", append(msg, '\n'))
}

func TestSlackMessageWithinLimits(t *testing.T) {
	ev := testEvent()
	ev.Task.Output = strings.Repeat("<&> `` a long line of output with markup ```\n", 2000)
	ev.Task.Diagnostic = strings.Repeat("d", 300)
	ev.Task.Reason = strings.Repeat("r", 5000)
	msg := SlackMessage(ev)
	if len(msg.Blocks[0].Text.Text) > slackHeaderMax {
		t.Errorf("header %d bytes", len(msg.Blocks[0].Text.Text))
	}
	var code string
	for _, b := range msg.Blocks {
		if b.Text != nil && len(b.Text.Text) > slackSectionMax {
			t.Errorf("%s block: %d bytes", b.Type, len(b.Text.Text))
		}
		for _, f := range b.Fields {
			if len(f.Text) > slackFieldMax {
				t.Errorf("field: %d bytes", len(f.Text))
			}
		}
		if b.Text != nil && strings.HasPrefix(b.Text.Text, "```") {
			code = b.Text.Text
		}
	}
	if !strings.Contains(code, "autodiag show t-42") {
		t.Errorf("the cut code block does not say where the whole output is")
	}
	if strings.Count(code, "```") != 2 || strings.ContainsAny(strings.Trim(code, "`"), "<>") {
		t.Errorf("output not escaped inside the code block")
	}
}
