package listener

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/task"
)

// fakeBatchSQS records SendMessageBatch calls; failIn makes that call's
// first entry fail.
type fakeBatchSQS struct {
	mu     sync.Mutex
	calls  [][]string
	failIn int
	err    error
}

var _ SQSBatchAPI = (*fakeBatchSQS)(nil)

func (f *fakeBatchSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var bodies []string
	for _, e := range in.Entries {
		bodies = append(bodies, aws.ToString(e.MessageBody))
	}
	f.calls = append(f.calls, bodies)
	out := &sqs.SendMessageBatchOutput{}
	if len(f.calls) == f.failIn {
		out.Failed = []types.BatchResultErrorEntry{{Id: in.Entries[0].Id, Code: aws.String("InternalError"), Message: aws.String("try again")}}
	}
	return out, nil
}

func alertTasks(n int) []task.Task {
	ts := make([]task.Task, n)
	for i := range ts {
		ts[i] = task.Task{ID: "t" + string(rune('a'+i)), Host: "web-1", Diagnostic: "uptime"}
	}
	return ts
}

func TestSQSSenderSendsInBatchesOfTen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tasks   int
		failIn  int
		err     error
		sizes   []int
		wantErr string
	}{
		{name: "none", tasks: 0},
		{name: "one call", tasks: 10, sizes: []int{10}},
		{name: "chunks", tasks: 23, sizes: []int{10, 10, 3}},
		{name: "a failed entry fails the send", tasks: 23, failIn: 2, sizes: []int{10, 10}, wantErr: "1 of 10 entries failed, first InternalError"},
		{name: "a failed call", tasks: 3, err: errors.New("boom"), wantErr: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBatchSQS{failIn: tc.failIn, err: tc.err}
			err := NewSQSSender(f, "https://sqs.example/q").SendBatch(t.Context(), alertTasks(tc.tasks))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			var sizes []int
			for _, c := range f.calls {
				sizes = append(sizes, len(c))
				for _, b := range c {
					var got task.Task
					if err := json.Unmarshal([]byte(b), &got); err != nil || got.Diagnostic != "uptime" {
						t.Fatalf("body %s is not the task: %v", b, err)
					}
				}
			}
			if len(sizes) != len(tc.sizes) || (len(sizes) > 0 && !equalInts(sizes, tc.sizes)) {
				t.Fatalf("batch sizes %v, want %v", sizes, tc.sizes)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHandlerNeedsItsCredentials: a named variable that is unset is
// an *Error, which cmd maps to exit 2.
func TestHandlerNeedsItsCredentials(t *testing.T) {
	cfg, err := config.Load([]byte("intake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: TOKEN}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewHandler(cfg, Options{Sender: nopSender{}, Getenv: func(string) (string, bool) { return "", false }})
	var ie *Error
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "TOKEN is unset") {
		t.Fatalf("err = %v, want an *Error naming TOKEN", err)
	}
	if _, err := NewHandler(cfg, Options{Sender: nopSender{}, Getenv: func(string) (string, bool) { return "t", true }}); err != nil {
		t.Fatal(err)
	}
}

// The intake serves Slack's interactivity when intake.slack names a
// signing secret: signed by Slack and not intake.auth, refused unsigned;
// a missing secret is an *Error at start; a bad approver id names its key.
func TestIntakeServesSlackInteractions(t *testing.T) {
	const yaml = "intake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: TOKEN}\n  slack:\n    signing_secret_env: SLACK_SECRET\n    approvers: [U0APPROVER]\n"
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) (string, bool) {
		return map[string]string{"TOKEN": "t", "SLACK_SECRET": "s3cret"}[k], k != ""
	}
	if _, err := NewHandler(cfg, Options{Sender: nopSender{}, Getenv: func(k string) (string, bool) {
		if k == "SLACK_SECRET" {
			return "", false
		}
		return getenv(k)
	}}); err == nil || !strings.Contains(err.Error(), "intake.slack.signing_secret_env") && !strings.Contains(err.Error(), "slack.signing_secret_env") {
		t.Fatalf("err = %v, want the missing signing secret named", err)
	}
	reg := prometheus.NewPedanticRegistry()
	h, err := NewHandler(cfg, Options{Sender: nopSender{}, Getenv: getenv, Slack: slackact.Options{Metrics: slackact.NewMetrics(reg)}})
	if err != nil {
		t.Fatal(err)
	}
	js := `{"type":"block_actions","user":{"id":"U0APPROVER"},"actions":[{"action_id":"approve","value":"task-1"}]}`
	body := url.Values{"payload": {js}}.Encode()
	send := func(sign bool) int {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, slackact.Path, strings.NewReader(body))
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		r.Header.Set("X-Slack-Request-Timestamp", ts)
		if sign {
			r.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(slackact.Sign("s3cret", ts, []byte(body))))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	// Signed, without intake.auth's token: the approval reaches the
	// handler, which has no Approver here.
	if code := send(true); code != http.StatusNotImplemented {
		t.Fatalf("signed: %d, want 501 (approvals not configured)", code)
	}
	if code := send(false); code != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d, want 401", code)
	}
	bad, err := config.Load([]byte(strings.Replace(yaml, "U0APPROVER", "alice", 1)), nil)
	if err == nil {
		err = bad.Intake.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "approvers[0]") {
		t.Fatalf("bad approver: %v, want approvers[0] named", err)
	}
}

// nopSender takes every task and sends nothing: these tests look at the
// handler's construction only.
type nopSender struct{}

func (nopSender) SendBatch(context.Context, []task.Task) error { return nil }
