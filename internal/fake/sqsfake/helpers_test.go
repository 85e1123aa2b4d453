package sqsfake_test

import (
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backoffLog records the SDK retryer's decisions: every retry it schedules,
// with the error and whether the SDK classified it as a throttle.
type backoffLog struct {
	mu       sync.Mutex
	attempts []int
	errs     []error
	throttle []bool
}

func (b *backoffLog) BackoffDelay(attempt int, err error) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts = append(b.attempts, attempt)
	b.errs = append(b.errs, err)
	b.throttle = append(b.throttle, retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary)
	return 0, nil // no real waiting in tests; the retry decision is the SDK's own
}

func (b *backoffLog) retries() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.attempts)
}

type env struct {
	srv     *sqsfake.Server
	client  *sqs.Client
	clock   *sqsfake.FakeClock // nil with the real clock
	backoff *backoffLog
	url     string
}

// newEnv starts a fake with a FakeClock and an SDK client using the standard
// retryer (3 attempts) with zero backoff delay.
func newEnv(t *testing.T, opts ...sqsfake.Option) *env {
	t.Helper()
	clock := sqsfake.NewFakeClock(epoch)
	e := newEnvClock(t, append([]sqsfake.Option{sqsfake.WithClock(clock)}, opts...)...)
	e.clock = clock
	return e
}

func newEnvClock(t *testing.T, opts ...sqsfake.Option) *env {
	t.Helper()
	srv, ts := sqsfake.NewTestServer(t, opts...)
	bl := &backoffLog{}
	client := sqs.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		BaseEndpoint: aws.String(ts.URL),
	}, func(o *sqs.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.Backoff = bl })
	})
	return &env{srv: srv, client: client, backoff: bl, url: ts.URL}
}

func (e *env) queue(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	out, err := e.client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

func (e *env) send(t *testing.T, url, body string) string {
	t.Helper()
	out, err := e.client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	return aws.ToString(out.MessageId)
}

func (e *env) receive(t *testing.T, url string, max int32) []sqsMessage {
	t.Helper()
	out, err := e.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max,
		MessageSystemAttributeNames: []sqsSysName{"All"},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

// waitFor polls cond until it holds; it fails the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// async runs f in a goroutine and returns a channel with its results.
func async[T any](f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	return ch
}

type result[T any] struct {
	v   T
	err error
}

func await[T any](t *testing.T, ch <-chan result[T]) (T, error) {
	t.Helper()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(15 * time.Second):
		t.Fatal("call did not return")
		var zero T
		return zero, nil
	}
}
