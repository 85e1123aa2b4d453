package lifecycle_test

// The sqs source against internal/fake/sqsfake (the project's SQS fake) with the real
// SDK clients for SQS and Auto Scaling. This test-only import of internal/fake/sqsfake
// is the one place the lifecycle package touches agent/: the production code
// does not.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/lifecycle"
)

// lifecycleQueue starts the SQS fake with a queue "lifecycle" (visibility
// timeout 30 s, SQS's default) and returns a context bounding the test.
func lifecycleQueue(t *testing.T) (context.Context, *sqsfake.Server, *httptest.Server, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	srv, ts := sqsfake.NewTestServer(t)
	url, err := srv.CreateQueue("lifecycle", map[string]string{"VisibilityTimeout": "30"})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, srv, ts, url
}

func TestSQSSourceAgainstSQSFake(t *testing.T) {
	tests := []struct {
		name string
		wrap func(string) string
	}{
		{"direct", func(b string) string { return b }},
		{"SNS wrapped", func(b string) string {
			out, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": "m", "Message": b})
			return string(out)
		}},
		{"EventBridge", func(b string) string {
			if strings.Contains(b, "TEST_NOTIFICATION") {
				return b
			}
			return `{"version":"0","detail-type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling","time":"2026-08-11T10:00:00Z","detail":` + b + `}`
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, srv, sqsTS, queueURL := lifecycleQueue(t)
			sqsClient := sqs.NewFromConfig(sqsfake.SDKConfig(sqsTS.URL))

			// Auto Scaling notifies the queue, as a hook with an SQS target does.
			var sent []string // message ids in order: test, i-2's, i-1's
			fake := asgfake.New(asgfake.Options{Seed: 5, Notify: func(body string) {
				out, err := sqsClient.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(tt.wrap(body))})
				if err != nil {
					t.Errorf("send notification: %v", err)
					return
				}
				sent = append(sent, aws.ToString(out.MessageId))
			}})
			asgTS := httptest.NewServer(fake)
			defer asgTS.Close()
			asgCfg := sqsfake.SDKConfig(asgTS.URL)
			asgClient := autoscaling.NewFromConfig(asgCfg)
			fake.AddGroup("web")
			for _, id := range []string{"i-1", "i-2"} {
				if err := fake.AddInstance("web", id); err != nil {
					t.Fatal(err)
				}
			}
			if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 5 * time.Minute,
				NotificationTargetARN: srv.QueueARN("lifecycle")}); err != nil {
				t.Fatal(err)
			}
			if _, err := fake.Terminate("i-2"); err != nil {
				t.Fatal(err)
			}
			ours, err := fake.Terminate("i-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(sent) != 3 {
				t.Fatalf("sent %d notifications; want 3", len(sent))
			}

			cfg := lifecycle.DefaultConfig()
			cfg.Sources = []string{lifecycle.SourceSignal, lifecycle.SourceSQS}
			cfg.QueueURL = queueURL
			cfg.HookName = "drain"
			d := lifecycle.Deps{AutoScaling: asgClient, SQS: sqsClient, InstanceID: "i-1"}
			w, err := lifecycle.NewWatcher(cfg, d)
			if err != nil {
				t.Fatal(err)
			}
			var fired []lifecycle.Trigger
			var firedAt time.Time
			if err := w.Run(ctx, func(tr lifecycle.Trigger) { fired, firedAt = append(fired, tr), time.Now() }); err != nil {
				t.Fatal(err)
			}
			if len(fired) != 1 || fired[0].Action == nil || fired[0].Action.Token != ours[0].Token || fired[0].Source != lifecycle.SourceSQS {
				t.Fatalf("fired = %+v; want one sqs trigger with token %s", fired, ours[0].Token)
			}
			for _, c := range srv.Calls("ReceiveMessage") {
				if c.Time.After(firedAt) {
					t.Fatalf("ReceiveMessage at %s, after the trigger fired at %s", c.Time, firedAt)
				}
			}
			state := func() map[string]string {
				v, _ := srv.Queue("lifecycle")
				out := map[string]string{}
				for _, m := range v.History {
					out[m.ID] = m.State
				}
				return out
			}
			st := state()
			if st[sent[0]] != "deleted" || st[sent[1]] == "deleted" || st[sent[2]] != "inflight" {
				t.Fatalf("queue = %v; want TEST_NOTIFICATION %s deleted, i-2's %s kept, ours %s in flight", st, sent[0], sent[1], sent[2])
			}
			v, _ := srv.Queue("lifecycle")
			for _, m := range v.Messages {
				if m.ID == sent[2] && time.Until(m.VisibleAt) < 45*time.Second {
					t.Errorf("our notification visible again at %s; want hidden well past the queue's 30s while draining", m.VisibleAt)
				}
				if m.ID == sent[1] && m.State != "visible" {
					t.Errorf("i-2's notification is %s; want visible at once for its owner", m.State)
				}
			}

			actor := lifecycle.NewActor(cfg, d)
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer ccancel()
			if err := actor.Complete(cctx, *fired[0].Action, lifecycle.ResultContinue); err != nil {
				t.Fatal(err)
			}
			st = state()
			if st[sent[2]] != "deleted" || st[sent[1]] == "deleted" {
				t.Fatalf("after completion queue = %v; want ours deleted, i-2's kept", st)
			}
			if a, _ := fake.Action("i-1"); a.Completions != 1 || a.Result != lifecycle.ResultContinue {
				t.Fatalf("action = %+v; want completed once", a)
			}
			if n := srv.Counters()["DeleteMessage"]; n != 2 {
				t.Fatalf("%d DeleteMessage calls; want 2 (TEST_NOTIFICATION, ours after completion)", n)
			}
		})
	}
}

// loseAnswer passes requests to the fake but throws away the first
// ReceiveMessage answer that carries a message, as when the agent that
// polled stops reading (its poll aborted, its process killed) after SQS
// has sent it: SQS has hidden the messages all the same.
type loseAnswer struct {
	once sync.Once
	lost chan struct{}
}

func (l *loseAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".ReceiveMessage") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	dropped := false
	if strings.Contains(string(body), "ReceiptHandle") {
		l.once.Do(func() { dropped = true; close(l.lost) })
	}
	if dropped {
		return nil, errors.New("answer lost")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// TestLostAnswerHidesNoticeBriefly: a notice in a ReceiveMessage answer that
// never reaches its poller is hidden for receiveVisibility (1 s), not for
// the queue's visibility timeout (30 s here), and its own instance's agent
// receives it well before the queue's timeout would have shown it.
func TestLostAnswerHidesNoticeBriefly(t *testing.T) {
	ctx, srv, sqsTS, queueURL := lifecycleQueue(t)
	sent := time.Now()
	notice := `{"Origin":"AutoScalingGroup","Destination":"EC2","Time":"` + sent.UTC().Format(time.RFC3339) +
		`","LifecycleActionToken":"tok-2","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-2","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`
	sqsCfg := sqsfake.SDKConfig(sqsTS.URL)
	client := sqs.NewFromConfig(sqsCfg)
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(notice)}); err != nil {
		t.Fatal(err)
	}
	cfg := lifecycle.DefaultConfig()
	cfg.Sources = []string{lifecycle.SourceSQS}
	cfg.QueueURL = queueURL
	cfg.HookName = "drain"

	// Agent i-1 polls; the answer carrying i-2's notice never reaches it.
	lose := &loseAnswer{lost: make(chan struct{})}
	lossy := sqs.NewFromConfig(sqsCfg, func(o *sqs.Options) {
		o.HTTPClient = &http.Client{Transport: lose}
		o.RetryMaxAttempts = 1
	})
	w1, err := lifecycle.NewWatcher(cfg, lifecycle.Deps{SQS: lossy, InstanceID: "i-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, stop1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- w1.Run(ctx1, func(tr lifecycle.Trigger) { t.Errorf("i-1 fired %+v", tr) }) }()
	select {
	case <-lose.lost:
	case <-ctx.Done():
		t.Fatal("no answer with the notice reached the lossy transport")
	}
	stop1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	v, _ := srv.Queue("lifecycle")
	for _, m := range v.Messages {
		if hidden := m.VisibleAt.Sub(sent); m.State == "inflight" && hidden > 30*time.Second-time.Second {
			t.Fatalf("the lost notice is hidden until %s after it was sent; want about a second, not the queue's 30 s", hidden)
		}
	}

	// Agent i-2 takes its notice once the brief hiding ends.
	w2, err := lifecycle.NewWatcher(cfg, lifecycle.Deps{SQS: client, InstanceID: "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop2 := context.WithTimeout(ctx, 20*time.Second) // less than the queue's 30 s
	defer stop2()
	var fired []lifecycle.Trigger
	if err := w2.Run(ctx2, func(tr lifecycle.Trigger) { fired = append(fired, tr) }); err != nil {
		t.Fatal(err)
	}
	if len(fired) != 1 || fired[0].Action == nil || fired[0].Action.Token != "tok-2" {
		t.Fatalf("i-2 fired %+v within 20 s; want its notice, hidden only briefly by the lost answer", fired)
	}
}
