package slackact

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

var now = time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)

type decision struct {
	task    string
	approve bool
	by      string
}

type fakeApprover struct {
	mu    sync.Mutex
	calls []decision
	err   error
}

func (f *fakeApprover) Decide(_ context.Context, id string, approve bool, by, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, decision{id, approve, by})
	return f.err
}

// payload is a block_actions body as Slack sends it: form-encoded, the
// JSON in payload=.
func payload(user, action, value, responseURL string) []byte {
	js, _ := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]string{"id": "T0001"},
		"user":         map[string]string{"id": user, "username": "someone", "team_id": "T0001"},
		"api_app_id":   "A0001",
		"trigger_id":   "1234.5678",
		"response_url": responseURL,
		"actions": []map[string]string{{"type": "button", "action_id": action, "block_id": "b1", "value": value,
			"action_ts": "1733378400.000100"}},
	})
	return []byte(url.Values{"payload": {string(js)}}.Encode())
}

// request signs body with key at ts.
func request(body []byte, key string, ts time.Time) *http.Request {
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, Path, strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	t := strconv.FormatInt(ts.Unix(), 10)
	r.Header.Set("X-Slack-Request-Timestamp", t)
	r.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(Sign(key, t, body)))
	return r
}

type fixture struct {
	h       *Handler
	m       *Metrics
	replies chan string
	url     string
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{replies: make(chan string, 8)}
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.replies <- string(b)
	}))
	t.Cleanup(slack.Close)
	f.url = slack.URL + "/actions/T0001/1/abc"
	loopback := func(u *url.URL) bool { return u.Hostname() == "127.0.0.1" }
	f.m = NewMetrics(prometheus.NewPedanticRegistry())
	o.Metrics = f.m
	o.Replies = NewReplier(slack.Client(), loopback, nil)
	t.Cleanup(o.Replies.Wait)
	o.Getenv = func(k string) (string, bool) { return secret, k == "SLACK_SIGNING_SECRET" }
	o.Config.SigningSecretEnv = "SLACK_SIGNING_SECRET"
	o.Clock = clock.NewManual(now)
	f.h = New(o)
	return f
}

func (f *fixture) do(r *http.Request) (int, map[string]string) {
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	var ans map[string]string
	_ = json.Unmarshal(w.Body.Bytes(), &ans)
	return w.Code, ans
}

func (f *fixture) count(action, result string) float64 {
	return testutil.ToFloat64(f.m.total.WithLabelValues(action, result))
}

// A signed press of Approve by an approver decides the task through the
// Approver, by the Slack user, and the person is told through the
// response_url.
func TestSignedInteractionApproves(t *testing.T) {
	ap := &fakeApprover{}
	f := newFixture(t, Options{Config: alert.SlackConfig{Approvers: []string{"U0APPROVER"}}, Approver: ap})
	code, ans := f.do(request(payload("U0APPROVER", ActionApprove, "task-42", f.url), secret, now.Add(-time.Minute)))
	if code != http.StatusOK || ans["result"] != ResultApproved {
		t.Fatalf("answer %d %v, want 200 approved", code, ans)
	}
	if len(ap.calls) != 1 || ap.calls[0] != (decision{"task-42", true, "slack:U0APPROVER"}) {
		t.Fatalf("approver calls %+v", ap.calls)
	}
	select {
	case got := <-f.replies:
		if !strings.Contains(got, `"response_type":"ephemeral"`) || !strings.Contains(got, "approved task task-42") {
			t.Fatalf("reply %s", got)
		}
	case <-time.After(ReplyTimeout):
		t.Fatal("no reply at the response_url")
	}
	code, ans = f.do(request(payload("U0APPROVER", ActionDeny, "task-43", ""), secret, now))
	if code != http.StatusOK || ans["result"] != ResultDenied || len(ap.calls) != 2 || ap.calls[1].approve {
		t.Fatalf("deny: %d %v %+v", code, ans, ap.calls)
	}
	ap.err = fmt.Errorf("store: %w", ErrAlreadyDecided)
	if code, ans = f.do(request(payload("U0APPROVER", ActionApprove, "task-43", ""), secret, now)); code != http.StatusConflict || ans["result"] != ResultConflict {
		t.Fatalf("decided twice: %d %v", code, ans)
	}
	if f.count(ActionApprove, ResultApproved) != 1 || f.count(ActionDeny, ResultDenied) != 1 || f.count(ActionApprove, ResultConflict) != 1 {
		t.Fatal("interactions not counted by action and result")
	}
}

// A bad signature, an old timestamp, a user not in the allow-list and an
// unknown action are refused with their status, counted, and decide
// nothing.
func TestInteractionRefusals(t *testing.T) {
	ap := &fakeApprover{}
	f := newFixture(t, Options{Config: alert.SlackConfig{Approvers: []string{"U0APPROVER"}}, Approver: ap})
	body := payload("U0APPROVER", ActionApprove, "task-42", f.url)
	tampered := request(body, secret, now)
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(string(body), "task-42", "task-43", 1)))
	cases := []struct {
		name   string
		r      *http.Request
		code   int
		action string
		result string
	}{
		{"wrong secret", request(body, "not-the-secret", now), http.StatusUnauthorized, actionNone, ResultBadSignature},
		{"tampered body", tampered, http.StatusUnauthorized, actionNone, ResultBadSignature},
		{"old timestamp", request(body, secret, now.Add(-Window-time.Second)), http.StatusUnauthorized, actionNone, ResultStale},
		{"future timestamp", request(body, secret, now.Add(Window+time.Second)), http.StatusUnauthorized, actionNone, ResultStale},
		{"not an approver", request(payload("U0SOMEONE", ActionApprove, "task-42", f.url), secret, now), http.StatusForbidden, ActionApprove, ResultNotAllowed},
		{"unknown action", request(payload("U0APPROVER", "restart_everything", "task-42", ""), secret, now), http.StatusBadRequest, actionNone, ResultUnknownAction},
	}
	for _, c := range cases {
		before := f.count(c.action, c.result)
		code, ans := f.do(c.r)
		if code != c.code || ans["result"] != c.result {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, ans, c.code, c.result)
		}
		if f.count(c.action, c.result) != before+1 {
			t.Errorf("%s: not counted as {%s,%s}", c.name, c.action, c.result)
		}
	}
	r := request(body, secret, now)
	r.Header.Del("X-Slack-Signature")
	if code, _ := f.do(r); code != http.StatusUnauthorized {
		t.Errorf("no signature: %d", code)
	}
	if len(ap.calls) != 0 {
		t.Fatalf("a refused interaction decided: %+v", ap.calls)
	}
	// The one refusal with a response_url that is authenticated tells
	// the person why.
	select {
	case got := <-f.replies:
		if !strings.Contains(got, "not in intake.slack.approvers") {
			t.Fatalf("reply %s", got)
		}
	case <-time.After(ReplyTimeout):
		t.Fatal("the user not allowed was not told")
	}
	// Without an Approver, approvals are answered not configured.
	f2 := newFixture(t, Options{Config: alert.SlackConfig{Approvers: []string{"U0APPROVER"}}})
	if code, ans := f2.do(request(payload("U0APPROVER", ActionApprove, "task-42", ""), secret, now)); code != http.StatusNotImplemented ||
		ans["text"] != "approvals are not configured" {
		t.Fatalf("nil approver: %d %v", code, ans)
	}
}

// 👍/👎 record a verdict through the feedback store, once per person:
// a second press by the same person keeps the first verdict, another
// person's counts; a user outside feedback_users is refused.
func TestFeedbackButtonsOncePerPerson(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "slackact:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rc.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			rc.Del(ctx, k)
		}
		_ = rc.Close()
	})
	store := feedback.NewRedis(rc, prefix, time.Hour)
	ctx := context.Background()
	ts := state.NewMemory(state.MemoryOptions{})
	if _, err := ts.Claim(ctx, state.TaskRecord{ID: "task-7", Diagnostic: "memory"}, "i", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Claim(ctx, state.TaskRecord{ID: "task-noreport", Diagnostic: "memory"}, "i", time.Minute); err != nil {
		t.Fatal(err)
	}
	rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: now})
	if _, err := ts.SetReport(ctx, "task-7", rep); err != nil {
		t.Fatal(err)
	}
	var recorded []string
	f := newFixture(t, Options{Config: alert.SlackConfig{FeedbackUsers: []string{"U0ALICE", "U0BOB"}}, Feedback: store, Tasks: ts,
		Recorded: func(v string) { recorded = append(recorded, v) }})
	steps := []struct {
		user, action, task string
		code               int
		result             string
	}{
		{"U0ALICE", ActionFeedbackGood, "task-7", http.StatusOK, ResultRecorded},
		{"U0ALICE", ActionFeedbackWrong, "task-7", http.StatusOK, ResultDuplicate},
		{"U0BOB", ActionFeedbackWrong, "task-7", http.StatusOK, ResultRecorded},
		{"U0MALLORY", ActionFeedbackGood, "task-7", http.StatusForbidden, ResultNotAllowed},
		{"U0BOB", ActionFeedbackGood, "task-noreport", http.StatusConflict, ResultConflict},
		{"U0BOB", ActionFeedbackGood, "task-missing", http.StatusNotFound, ResultNotFound},
	}
	for i, s := range steps {
		code, ans := f.do(request(payload(s.user, s.action, s.task, ""), secret, now))
		if code != s.code || ans["result"] != s.result {
			t.Fatalf("step %d %+v: %d %v", i, s, code, ans)
		}
	}
	log, err := store.Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].By != "slack:U0ALICE" || log[0].Verdict != feedback.Good || log[1].By != "slack:U0BOB" ||
		log[1].Verdict != feedback.Wrong || log[0].Diagnostic != "memory" || log[0].Confidence != "likely" {
		t.Fatalf("verdicts %+v, want Alice's good and Bob's wrong, placed by diagnostic and confidence", log)
	}
	if len(recorded) != 2 || recorded[0] != feedback.Good || recorded[1] != feedback.Wrong {
		t.Fatalf("told of %v, want the two recorded verdicts", recorded)
	}
	if f.count(ActionFeedbackGood, ResultRecorded) != 1 || f.count(ActionFeedbackWrong, ResultDuplicate) != 1 {
		t.Fatal("verdicts not counted")
	}
}

// A response_url off Slack is not called: a signed payload still cannot
// point the intake at another host.
func TestReplyOnlyToSlack(t *testing.T) {
	called := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called <- struct{}{} }))
	defer srv.Close()
	r := NewReplier(srv.Client(), nil, nil)
	r.Reply(t.Context(), srv.URL+"/actions/x", "hi")
	r.Reply(t.Context(), "http://"+SlackHost+"/actions/x", "hi")
	r.Wait()
	select {
	case <-called:
		t.Fatal("a reply went to a host other than https://" + SlackHost)
	default:
	}
}
