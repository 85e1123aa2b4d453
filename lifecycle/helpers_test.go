package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
)

// inProcess is an HTTP client that serves requests with a handler in the
// same goroutine: no sockets, so it works inside a testing/synctest bubble
// while the real SDK still serialises and parses every request.
type inProcess struct{ h http.Handler }

func (c inProcess) Do(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// newASGClient is the real SDK client over h. retryer nil = no SDK retries
// (the Actor's own backoff does the work).
func newASGClient(h http.Handler, retryer aws.Retryer) *autoscaling.Client {
	cfg := aws.Config{
		Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", Source: "test"}, nil
		}),
		BaseEndpoint: aws.String("http://autoscaling.test"),
		HTTPClient:   inProcess{h},
	}
	if retryer == nil {
		retryer = aws.NopRetryer{}
	}
	cfg.Retryer = func() aws.Retryer { return retryer }
	return autoscaling.NewFromConfig(cfg)
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// counter reads a counter of reg by name and label value (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// fakeSQS is a small in-memory queue with visibility timeouts, long polling
// and a record of every call. It follows SQS: a received message is hidden
// for the visibility timeout; ChangeMessageVisibility 0 shows it again.
type fakeSQS struct {
	mu       sync.Mutex
	now      func() time.Time
	msgs     []*fakeMsg
	calls    []sqsCall
	receipts int
	wake     chan struct{}
}

type fakeMsg struct {
	id, body, receipt string
	visibleAt         time.Time
	deleted           bool
	receives          int
}

type sqsCall struct {
	op, receipt string
	visibility  int32
	at          time.Time
}

var _ sqsAPI = (*fakeSQS)(nil)

func newFakeSQS() *fakeSQS { return &fakeSQS{now: time.Now, wake: make(chan struct{})} }

func (q *fakeSQS) send(id, body string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, &fakeMsg{id: id, body: body})
	close(q.wake)
	q.wake = make(chan struct{})
}

func (q *fakeSQS) record(c sqsCall) {
	c.at = q.now()
	q.calls = append(q.calls, c)
}

func (q *fakeSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	deadline := time.After(time.Duration(in.WaitTimeSeconds) * time.Second)
	q.mu.Lock()
	q.record(sqsCall{op: "ReceiveMessage"})
	for {
		var out []types.Message
		now := q.now()
		for _, m := range q.msgs {
			if m.deleted || now.Before(m.visibleAt) || len(out) == int(max(in.MaxNumberOfMessages, 1)) {
				continue
			}
			q.receipts++
			m.receipt = fmt.Sprintf("%s#%d", m.id, q.receipts)
			vt := 30 * time.Second // the queue's
			if in.VisibilityTimeout > 0 {
				vt = time.Duration(in.VisibilityTimeout) * time.Second
			}
			m.visibleAt = now.Add(vt)
			m.receives++
			out = append(out, types.Message{MessageId: aws.String(m.id), ReceiptHandle: aws.String(m.receipt), Body: aws.String(m.body)})
		}
		if len(out) > 0 {
			q.mu.Unlock()
			return &sqs.ReceiveMessageOutput{Messages: out}, nil
		}
		wake := q.wake
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			return &sqs.ReceiveMessageOutput{}, nil
		case <-wake:
		case <-time.After(time.Second): // visibility timeouts expire
		}
		q.mu.Lock()
	}
}

func (q *fakeSQS) find(receipt string) *fakeMsg {
	for _, m := range q.msgs {
		if m.receipt == receipt && !m.deleted {
			return m
		}
	}
	return nil
}

func (q *fakeSQS) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record(sqsCall{op: "DeleteMessage", receipt: aws.ToString(in.ReceiptHandle)})
	if m := q.find(aws.ToString(in.ReceiptHandle)); m != nil {
		m.deleted = true
	}
	return &sqs.DeleteMessageOutput{}, nil
}

func (q *fakeSQS) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record(sqsCall{op: "ChangeMessageVisibility", receipt: aws.ToString(in.ReceiptHandle), visibility: in.VisibilityTimeout})
	if m := q.find(aws.ToString(in.ReceiptHandle)); m != nil {
		m.visibleAt = q.now().Add(time.Duration(in.VisibilityTimeout) * time.Second)
		close(q.wake)
		q.wake = make(chan struct{})
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// msg returns the state of a message by id.
func (q *fakeSQS) msg(id string) fakeMsg {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if m.id == id {
			return *m
		}
	}
	return fakeMsg{}
}

func (q *fakeSQS) callsFor(op, receiptPrefix string) []sqsCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []sqsCall
	for _, c := range q.calls {
		if c.op == op && strings.HasPrefix(c.receipt, receiptPrefix) {
			out = append(out, c)
		}
	}
	return out
}

var sqsReceive = sqs.ReceiveMessageInput{QueueUrl: aws.String("https://sqs.test/q"), MaxNumberOfMessages: 10}
