package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// fixture is the fake SQS server with a task queue and a DLQ, and a real SDK
// client pointed at it.
type fixture struct {
	srv    *sqsfake.Server
	client *sqs.Client
	url    string
	dlqURL string
}

func newFixture(tb testing.TB, optFns ...func(*sqs.Options)) *fixture {
	tb.Helper()
	srv, ts := sqsfake.NewTestServer(tb)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL), optFns...)
	ctx := tb.Context()
	mk := func(name string) string {
		out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			tb.Fatalf("CreateQueue %s: %v", name, err)
		}
		return aws.ToString(out.QueueUrl)
	}
	return &fixture{srv: srv, client: client, url: mk("tasks"), dlqURL: mk("tasks-dlq")}
}

func (f *fixture) source(o queue.SQSOptions) *queue.SQS {
	if o.QueueURL == "" {
		o.QueueURL = f.url
	}
	if o.WaitTime == 0 {
		o.WaitTime = time.Second
	}
	return queue.NewSQS(f.client, o)
}

func (f *fixture) send(tb testing.TB, body string, attrs map[string]string) string {
	tb.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(body)}
	if len(attrs) > 0 {
		in.MessageAttributes = map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	out, err := f.client.SendMessage(tb.Context(), in)
	if err != nil {
		tb.Fatalf("SendMessage: %v", err)
	}
	return aws.ToString(out.MessageId)
}

// receiveN receives until n messages arrived.
func receiveN(tb testing.TB, q *queue.SQS, n int) []*queue.Message {
	tb.Helper()
	var out []*queue.Message
	for len(out) < n {
		ms, err := q.Receive(tb.Context(), n-len(out))
		if err != nil {
			tb.Fatalf("Receive: %v", err)
		}
		if len(ms) == 0 {
			tb.Fatalf("Receive returned nothing after %d of %d messages", len(out), n)
		}
		out = append(out, ms...)
	}
	return out
}

func TestSQSOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    queue.SQSOptions
		want []string // keys of the problems, relative to the queue section; none = valid
	}{
		{"ok", queue.SQSOptions{QueueURL: "u", WaitTime: 20 * time.Second, VisibilityTimeout: time.Minute}, nil},
		{"missing url", queue.SQSOptions{}, []string{"url"}},
		{"all wrong", queue.SQSOptions{WaitTime: 21 * time.Second, VisibilityTimeout: 13 * time.Hour},
			[]string{"url", "wait_time", "visibility_timeout"}},
		{"negative windows", queue.SQSOptions{QueueURL: "u", DeleteBatchWindow: -1, DeleteBatchMaxWait: -1},
			[]string{"DeleteBatchWindow", "DeleteBatchMaxWait"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want errors naming %v", tc.want)
			}
			var keys []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *configerr.Error
				if !errors.As(e, &ce) {
					t.Fatalf("problem %q is not a *configerr.Error", e)
				}
				keys = append(keys, ce.Key)
			}
			if !slices.Equal(keys, tc.want) {
				t.Errorf("Validate = %q: keys %q, want %q", err, keys, tc.want)
			}
		})
	}
}

func TestSQSReceiveMapsMessage(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{VisibilityTimeout: 45 * time.Second, WaitTime: 3 * time.Second})
	defer q.Close(context.Background())
	id := f.send(t, `{"id":"evt-1"}`, map[string]string{"source": "zabbix"})

	ms := receiveN(t, q, 1)
	m := ms[0]
	if m.ID != id || string(m.Body) != `{"id":"evt-1"}` || m.ReceiveCount != 1 || m.Handle == "" ||
		m.Attributes["source"] != "zabbix" || m.SentAt.IsZero() || time.Since(m.SentAt) > time.Hour {
		t.Errorf("message = %+v", m)
	}
	calls := f.srv.Calls("ReceiveMessage")
	if len(calls) != 1 || calls[0].Wait != 3*time.Second {
		t.Errorf("ReceiveMessage calls = %+v, want one with a 3s long poll", calls)
	}
	view, _ := f.srv.Queue("tasks")
	if len(view.Messages) != 1 || view.Messages[0].State != "inflight" ||
		time.Until(view.Messages[0].VisibleAt) > 45*time.Second || time.Until(view.Messages[0].VisibleAt) < 30*time.Second {
		t.Errorf("queue = %+v, want the message in flight for the requested 45s", view.Messages)
	}
}

func TestSQSReceiveBatchLimit(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{})
	defer q.Close(context.Background())
	for i := range 15 {
		f.send(t, fmt.Sprint(i), nil)
	}
	total := 0
	for total < 15 {
		ms, err := q.Receive(context.Background(), 50) // asks for more than SQS allows
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) > 10 {
			t.Fatalf("got %d messages in one receive, want at most 10", len(ms))
		}
		total += len(ms)
	}
	for _, c := range f.srv.Calls("ReceiveMessage") {
		if c.Status != 200 {
			t.Errorf("ReceiveMessage answered %d %s: the source asked for more than 10?", c.Status, c.ErrorCode)
		}
	}
}

// TestSQSReceiveCancel: cancelling ctx aborts a long poll (after the
// ReceiveGrace), and no ReceiveMessage starts with a cancelled ctx.
func TestSQSReceiveCancel(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{WaitTime: 20 * time.Second})
	defer q.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		ms, err := q.Receive(ctx, 10)
		if len(ms) != 0 {
			err = fmt.Errorf("got %d messages from an empty queue", len(ms))
		}
		done <- err
	}()
	waitFor(t, func() bool { return f.srv.Pollers("tasks") == 1 })
	cancel()
	// Had the cancel not reached the HTTP request, Receive would end after
	// the 20s poll with no error (waitFor gives up after 10s).
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive after cancel = %v, want context.Canceled", err)
	}
	waitFor(t, func() bool { return f.srv.Pollers("tasks") == 0 })
	before := len(f.srv.Calls("ReceiveMessage"))
	for range 3 {
		if _, err := q.Receive(ctx, 10); !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive with a cancelled ctx = %v, want context.Canceled", err)
		}
	}
	if after := len(f.srv.Calls("ReceiveMessage")); after != before {
		t.Errorf("%d ReceiveMessage calls started after cancel", after-before)
	}
}

// cancelDuringReceive cancels the caller's context as its ReceiveMessage
// goes out: the answer crosses the cancel, as when a drain begins while
// SQS is already answering.
type cancelDuringReceive struct {
	queue.SQSAPI
	cancel context.CancelFunc
}

func (c cancelDuringReceive) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.cancel()
	return c.SQSAPI.ReceiveMessage(ctx, in, opts...)
}

// TestSQSReceiveAnswerCrossingCancel: SQS hands messages out the moment it
// answers; an answer that arrives just after the caller's ctx ended is
// returned rather than dropped, so its messages are not left in flight,
// unseen, until their visibility lapses.
func TestSQSReceiveAnswerCrossingCancel(t *testing.T) {
	f := newFixture(t)
	f.send(t, "a", nil)
	f.send(t, "b", nil)
	ctx, cancel := context.WithCancel(context.Background())
	// A generous grace keeps the test independent of machine speed.
	q := queue.NewSQS(cancelDuringReceive{SQSAPI: f.client, cancel: cancel},
		queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, ReceiveGrace: time.Minute})
	defer q.Close(context.Background())
	ms, err := q.Receive(ctx, 10)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Receive answered during its cancel = %d messages, %v; want both, no error", len(ms), err)
	}
	if ctx.Err() == nil {
		t.Fatal("the caller's ctx was not cancelled during the call")
	}
	if _, err := q.Receive(ctx, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("next Receive = %v, want context.Canceled", err)
	}
}

// slowAnswer stands in for the SDK's transport: its answer begins (the
// httptrace hook Receive watches fires) at once, and ends only when release
// is closed — or fails when its context is cancelled first, as a request
// cut off mid-body does.
type slowAnswer struct {
	queue.SQSAPI
	begun   chan struct{}
	release chan struct{}
}

func (s slowAnswer) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.GotFirstResponseByte != nil {
		tr.GotFirstResponseByte()
	}
	close(s.begun)
	select {
	case <-s.release:
		return &sqs.ReceiveMessageOutput{Messages: []types.Message{{MessageId: aws.String("m-1"), ReceiptHandle: aws.String("h-1"), Body: aws.String("a")}}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestSQSReceiveGrace: once the caller's ctx ends, a poll whose answer has
// begun is read to its end past the grace, and an idle one is aborted when
// the grace ends.
func TestSQSReceiveGrace(t *testing.T) {
	decided := make(chan bool, 1)
	onDecided := func(answering bool) { decided <- answering }

	t.Run("answer begun", func(t *testing.T) {
		api := slowAnswer{begun: make(chan struct{}), release: make(chan struct{})}
		q := queue.NewSQS(api, queue.SQSOptions{QueueURL: "https://sqs.test/1/tasks", WaitTime: time.Second, ReceiveGrace: time.Millisecond, OnGraceDecided: onDecided})
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			n   int
			err error
		}
		got := make(chan result, 1)
		go func() {
			ms, err := q.Receive(ctx, 10)
			got <- result{len(ms), err}
		}()
		<-api.begun
		cancel()
		select {
		case answering := <-decided:
			if !answering {
				t.Fatal("grace ended with the answer not begun; want begun")
			}
		case r := <-got:
			t.Fatalf("Receive ended before its grace: %d messages, %v", r.n, r.err)
		}
		close(api.release) // the rest of the answer arrives after the grace
		if r := <-got; r.err != nil || r.n != 1 {
			t.Fatalf("Receive = %d messages, %v; want the begun answer read: 1, nil", r.n, r.err)
		}
	})

	t.Run("idle", func(t *testing.T) {
		f := newFixture(t)
		q := f.source(queue.SQSOptions{WaitTime: 20 * time.Second, ReceiveGrace: time.Millisecond, OnGraceDecided: onDecided})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := q.Receive(ctx, 10); done <- err }()
		waitFor(t, func() bool { return f.srv.Pollers("tasks") == 1 })
		cancel()
		if answering := <-decided; answering {
			t.Fatal("an idle long poll counted as answering")
		}
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive = %v, want context.Canceled", err)
		}
	})
}

// TestSQSCloseAbortsReceive: Close ends a long poll with ErrClosed.
func TestSQSCloseAbortsReceive(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{WaitTime: 20 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := q.Receive(context.Background(), 10)
		done <- err
	}()
	waitFor(t, func() bool { return f.srv.Pollers("tasks") == 1 })
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Receive during Close = %v, want ErrClosed", err)
	}
	if _, err := q.Receive(context.Background(), 1); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		<-tick.C
	}
}

// TestSQSDeleteBatches: concurrent deletes share DeleteMessageBatch calls of
// at most 10 entries and every message is gone. Every batch is held until
// all 25 deletes are made, so the batching is decided by the group commit,
// not by how the scheduler happens to interleave the callers.
func TestSQSDeleteBatches(t *testing.T) {
	f := newFixture(t)
	const n = 25
	for i := range n {
		f.send(t, fmt.Sprint(i), nil)
	}
	g := &gatedDeletes{SQSAPI: f.client, open: make(chan struct{}), all: true}
	q := queue.NewSQS(g, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, DeleteBatchWindow: time.Hour})
	defer q.Close(context.Background())
	ms := receiveN(t, q, n)
	errs := make(chan error, n)
	go func() { errs <- q.Delete(context.Background(), ms[0]) }()
	waitFor(t, func() bool { return g.calls.Load() == 1 }) // the idle source sent it at once
	for _, m := range ms[1:] {
		go func() { errs <- q.Delete(context.Background(), m) }()
	}
	// Two full batches go at once, the last 4 too, not after their window
	// (an hour): no other message is left to join them.
	waitFor(t, func() bool { return g.calls.Load() == 4 && q.PendingDeletes() == 0 })
	close(g.open)
	closed := make(chan error, 1)
	go func() { closed <- q.Close(context.Background()) }()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Delete: %v", err)
		}
	}
	calls := f.srv.Calls("DeleteMessageBatch")
	sum := 0
	for _, c := range calls {
		if c.N > 10 || c.Failed != 0 {
			t.Errorf("batch of %d entries, %d failed", c.N, c.Failed)
		}
		sum += c.N
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	// Group commit: the first delete goes alone, the rest gather while a
	// batch is in flight, the last 4 once nothing else can join them.
	sizes := batchSizes(calls)
	slices.Sort(sizes)
	if sum != n || !slices.Equal(sizes, []int{1, 4, 10, 10}) {
		t.Errorf("batches %v for %d entries, want 1, 10, 10 and 4 entries for %d", batchSizes(calls), sum, n)
	}
	if calls := f.srv.Calls("DeleteMessage"); len(calls) != 0 {
		t.Errorf("%d single DeleteMessage calls, want none", len(calls))
	}
	if v, _ := f.srv.Queue("tasks"); !v.Empty() || v.Stats.Deleted != n {
		t.Errorf("queue after deletes: %d visible, %d in flight, %d deleted", v.Visible, v.InFlight, v.Stats.Deleted)
	}
}

// TestSQSDeleteSenderFault: an entry SQS rejects (a handle it never issued)
// fails alone, at once; the others in its batch succeed.
func TestSQSDeleteSenderFault(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{DeleteBatchWindow: time.Second})
	defer q.Close(context.Background())
	f.send(t, "a", nil)
	f.send(t, "b", nil)
	ms := receiveN(t, q, 2)
	bad := &queue.Message{ID: "bogus", Handle: "not-a-handle"}
	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range append(ms, bad) {
		wg.Go(func() {
			err := q.Delete(context.Background(), m)
			mu.Lock()
			results[m.ID] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	var be *queue.BatchEntryError
	if err := results["bogus"]; !errors.As(err, &be) || !be.SenderFault || be.Code != "ReceiptHandleIsInvalid" {
		t.Errorf("bogus delete = %v, want a sender-fault ReceiptHandleIsInvalid", err)
	}
	for _, m := range ms {
		if err := results[m.ID]; err != nil {
			t.Errorf("delete %s = %v", m.ID, err)
		}
	}
	failed := 0
	for _, c := range f.srv.Calls("DeleteMessageBatch") {
		failed += c.Failed
	}
	if failed != 1 {
		t.Errorf("%d failed entries seen by SQS, want 1 (sender faults are not retried)", failed)
	}
	if v, _ := f.srv.Queue("tasks"); !v.Empty() {
		t.Errorf("queue not empty: %+v", v)
	}
}

// flakyDeletes wraps a real client and makes chosen entries of
// DeleteMessageBatch fail with a server fault a number of times, as SQS may
// under load, without sending them.
type flakyDeletes struct {
	queue.SQSAPI
	mu       sync.Mutex
	failures map[string]int // receipt handle → failures left
}

var _ queue.SQSAPI = (*flakyDeletes)(nil)

func (f *flakyDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	var pass []types.DeleteMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if f.failures[*e.ReceiptHandle] > 0 {
			f.failures[*e.ReceiptHandle]--
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected"), SenderFault: false})
			continue
		}
		pass = append(pass, e)
	}
	f.mu.Unlock()
	out := &sqs.DeleteMessageBatchOutput{}
	if len(pass) > 0 {
		o, err := f.SQSAPI.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: in.QueueUrl, Entries: pass}, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful, out.Failed = o.Successful, o.Failed
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// TestSQSDeleteServerFaultRetried: entries failing with a server fault are
// sent again; past DeleteRetries the error is returned to that Delete only.
func TestSQSDeleteServerFaultRetried(t *testing.T) {
	f := newFixture(t)
	for _, s := range []string{"once", "always", "fine"} {
		f.send(t, s, nil)
	}
	flaky := &flakyDeletes{SQSAPI: f.client, failures: map[string]int{}}
	q := queue.NewSQS(flaky, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, DeleteBatchWindow: time.Second, DeleteRetries: 2})
	defer q.Close(context.Background())
	ms := receiveN(t, q, 3)
	byBody := map[string]*queue.Message{}
	for _, m := range ms {
		byBody[string(m.Body)] = m
	}
	flaky.failures[byBody["once"].Handle] = 1
	flaky.failures[byBody["always"].Handle] = 100
	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for body, m := range byBody {
		wg.Go(func() {
			err := q.Delete(context.Background(), m)
			mu.Lock()
			results[body] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	if results["once"] != nil || results["fine"] != nil {
		t.Errorf("results = %v, want once and fine deleted", results)
	}
	var be *queue.BatchEntryError
	if err := results["always"]; !errors.As(err, &be) || be.SenderFault || be.Code != "InternalError" {
		t.Errorf("always = %v, want the server-fault entry error", err)
	}
	if left := flaky.failures[byBody["always"].Handle]; left != 100-3 {
		t.Errorf("the failing entry was tried %d times, want 3 (1 + 2 retries)", 100-left)
	}
	v, _ := f.srv.Queue("tasks")
	if v.InFlight != 1 || v.Stats.Deleted != 2 {
		t.Errorf("queue: %d in flight, %d deleted; want the failing one left in flight", v.InFlight, v.Stats.Deleted)
	}
}

// gatedDeletes holds the first DeleteMessageBatch (every one with all)
// until open is closed.
type gatedDeletes struct {
	queue.SQSAPI
	open  chan struct{}
	all   bool
	calls atomic.Int32
}

var _ queue.SQSAPI = (*gatedDeletes)(nil)

func (g *gatedDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if g.calls.Add(1) == 1 || g.all {
		<-g.open
	}
	return g.SQSAPI.DeleteMessageBatch(ctx, in, opts...)
}

// TestSQSDeleteGroupCommit: an idle source sends a delete at once; deletes
// made while a batch is in flight gather, also past its return, and go
// together at their tenth.
func TestSQSDeleteGroupCommit(t *testing.T) {
	f := newFixture(t)
	for i := range 11 {
		f.send(t, fmt.Sprint(i), nil)
	}
	g := &gatedDeletes{SQSAPI: f.client, open: make(chan struct{})}
	q := queue.NewSQS(g, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, DeleteBatchWindow: time.Hour})
	defer q.Close(context.Background())
	ms := receiveN(t, q, 11)
	errs := make(chan error, 11)
	go func() { errs <- q.Delete(context.Background(), ms[0]) }()
	waitFor(t, func() bool { return q.PendingDeletes() == 0 && len(errs) == 0 }) // sent, held by the gate
	for _, m := range ms[1:4] {
		go func() { errs <- q.Delete(context.Background(), m) }()
	}
	waitFor(t, func() bool { return q.PendingDeletes() == 3 })
	close(g.open)
	if err := <-errs; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	waitFor(t, func() bool { return q.DeletesInFlight() == 0 })
	if p := q.PendingDeletes(); p != 3 {
		t.Fatalf("%d deletes pending after the first batch returned, want 3 still gathering", p)
	}
	for _, m := range ms[4:] {
		go func() { errs <- q.Delete(context.Background(), m) }()
	}
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	calls := f.srv.Calls("DeleteMessageBatch")
	if len(calls) != 2 || calls[0].N != 1 || calls[1].N != 10 {
		t.Errorf("batches = %v, want 1 then 10 entries", batchSizes(calls))
	}
}

// TestSQSDeleteGathersAfterReturn: right after a batch returned, with none
// in flight, deletes gather (here the window is an hour) until 10 are
// pending, instead of each going alone when SQS answers faster than tasks
// end.
func TestSQSDeleteGathersAfterReturn(t *testing.T) {
	f := newFixture(t)
	for i := range 11 {
		f.send(t, fmt.Sprint(i), nil)
	}
	q := queue.NewSQS(f.client, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, DeleteBatchWindow: time.Hour})
	defer q.Close(context.Background())
	ms := receiveN(t, q, 11)
	if err := q.Delete(context.Background(), ms[0]); err != nil { // idle: at once
		t.Fatalf("Delete: %v", err)
	}
	// Delete returned with its entry's result; its batch's goroutine
	// records the return a moment later. Until then the deletes below
	// would gather as behind one in flight and go when it returns.
	waitFor(t, func() bool { return q.DeletesInFlight() == 0 })
	errs := make(chan error, 10)
	for _, m := range ms[1:10] {
		go func() { errs <- q.Delete(context.Background(), m) }()
	}
	waitFor(t, func() bool { return q.PendingDeletes() == 9 })
	if n := len(f.srv.Calls("DeleteMessageBatch")); n != 1 {
		t.Fatalf("%d DeleteMessageBatch calls with 9 deletes gathering, want 1", n)
	}
	go func() { errs <- q.Delete(context.Background(), ms[10]) }()
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if sizes := batchSizes(f.srv.Calls("DeleteMessageBatch")); !slices.Equal(sizes, []int{1, 10}) {
		t.Errorf("batches %v, want 1 then 10 entries", sizes)
	}
}

func batchSizes(calls []sqsfake.Call) []int {
	var out []int
	for _, c := range calls {
		out = append(out, c.N)
	}
	return out
}

// TestSQSCloseFlushesDeletes: Close sends pending deletes without waiting for
// the batch window, then waits for every batch in flight.
func TestSQSCloseFlushesDeletes(t *testing.T) {
	f := newFixture(t)
	f.send(t, "a", nil)
	f.send(t, "b", nil)
	f.send(t, "c", nil) // received, not deleted: the second delete waits for it
	g := &gatedDeletes{SQSAPI: f.client, open: make(chan struct{})}
	q := queue.NewSQS(g, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second, DeleteBatchWindow: time.Hour})
	ms := receiveN(t, q, 3)
	errs := make(chan error, 2)
	go func() { errs <- q.Delete(context.Background(), ms[0]) }()
	waitFor(t, func() bool { return q.PendingDeletes() == 0 && len(errs) == 0 }) // in flight, held
	go func() { errs <- q.Delete(context.Background(), ms[1]) }()
	waitFor(t, func() bool { return q.PendingDeletes() == 1 })

	closed := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { closed <- q.Close(ctx) }()
	// The pending delete goes out at once, not after the hour-long window.
	waitFor(t, func() bool { return len(f.srv.Calls("DeleteMessageBatch")) == 1 })
	if len(closed) != 0 {
		t.Fatal("Close returned while a batch was still in flight")
	}
	close(g.open)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if v, _ := f.srv.Queue("tasks"); v.Stats.Deleted != 2 {
		t.Errorf("%d deleted after Close, want 2: %+v", v.Stats.Deleted, v)
	}
}

// TestSQSDeleteGathersLongerWhenBusy: once the last 10 deletes arrived
// within DeleteBatchMaxWait, a delete no longer goes alone after its
// DeleteBatchWindow (here a nanosecond) but waits up to
// DeleteBatchMaxWait (an hour) for its batch to fill.
func TestSQSDeleteGathersLongerWhenBusy(t *testing.T) {
	f := newFixture(t)
	for i := range 21 {
		f.send(t, fmt.Sprint(i), nil)
	}
	q := queue.NewSQS(f.client, queue.SQSOptions{QueueURL: f.url, WaitTime: time.Second,
		DeleteBatchWindow: time.Nanosecond, DeleteBatchMaxWait: time.Hour})
	defer q.Close(context.Background())
	ms := receiveN(t, q, 21) // the last stays received, so the batch cannot end for lack of others
	for _, m := range ms[:10] {
		// One at a time: the source is idle for each (no rate known yet).
		if err := q.Delete(context.Background(), m); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		waitFor(t, func() bool { return q.DeletesInFlight() == 0 })
	}
	errs := make(chan error, 10)
	go func() { errs <- q.Delete(context.Background(), ms[10]) }()
	waitFor(t, func() bool { return q.PendingDeletes() == 1 })
	for _, m := range ms[11:20] {
		go func() { errs <- q.Delete(context.Background(), m) }()
	}
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	want := []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10}
	if sizes := batchSizes(f.srv.Calls("DeleteMessageBatch")); !slices.Equal(sizes, want) {
		t.Errorf("batches %v, want %v", sizes, want)
	}
}

func TestSQSChangeVisibility(t *testing.T) {
	f := newFixture(t)
	// The source's clock runs with the wall clock (which the fake uses) plus
	// an offset the cases move forward.
	var offset time.Duration
	var cmu sync.Mutex
	now := func() time.Time { cmu.Lock(); defer cmu.Unlock(); return time.Now().Add(offset) }
	q := f.source(queue.SQSOptions{VisibilityTimeout: 30 * time.Second, Clock: clock.Func(now)})
	defer q.Close(context.Background())
	f.send(t, "a", nil)
	m := receiveN(t, q, 1)[0]
	visibleIn := func() time.Duration {
		v, _ := f.srv.Queue("tasks")
		if len(v.Messages) != 1 || v.Messages[0].State != "inflight" {
			t.Fatalf("queue = %+v, want one message in flight", v.Messages)
		}
		return time.Until(v.Messages[0].VisibleAt)
	}
	tests := []struct {
		name     string
		advance  time.Duration // the source's clock since the receive
		d        time.Duration
		min, max time.Duration // expected remaining visibility (wall time of the fake)
	}{
		{"extend", 0, 90 * time.Second, 80 * time.Second, 90 * time.Second},
		{"round up", 0, 1500 * time.Millisecond, time.Second, 2 * time.Second},
		{"clamp to 12h", 0, 13 * time.Hour, 12*time.Hour - time.Minute, 12 * time.Hour},
		// The source believes an hour passed since the receive; SQS caps the
		// total at 12 h from it, so at most 11 h remain.
		{"cap counts time in flight", time.Hour, 12 * time.Hour, 11*time.Hour - time.Minute, 11 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmu.Lock()
			offset += tc.advance
			cmu.Unlock()
			if err := q.ChangeVisibility(context.Background(), m, tc.d); err != nil {
				t.Fatalf("ChangeVisibility(%v): %v", tc.d, err)
			}
			if got := visibleIn(); got < tc.min || got > tc.max {
				t.Errorf("visible in %v, want within [%v, %v]", got, tc.min, tc.max)
			}
		})
	}
	t.Run("release", func(t *testing.T) {
		if err := q.ChangeVisibility(context.Background(), m, 0); err != nil {
			t.Fatalf("ChangeVisibility(0): %v", err)
		}
		again := receiveN(t, q, 1)[0]
		if again.ID != m.ID || again.ReceiveCount != 2 {
			t.Errorf("after release: %+v, want the same message received a second time", again)
		}
		if err := q.ChangeVisibility(context.Background(), m, time.Minute); err == nil {
			t.Error("ChangeVisibility with the stale handle succeeded")
		}
	})
}

func TestSQSDeadLetter(t *testing.T) {
	t.Run("no dlq", func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t)
		q := f.source(queue.SQSOptions{})
		defer q.Close(ctx)
		f.send(t, "bad", nil)
		m := receiveN(t, q, 1)[0]
		if err := q.DeadLetter(ctx, m, "malformed"); !errors.Is(err, queue.ErrNoDeadLetter) {
			t.Errorf("DeadLetter = %v, want ErrNoDeadLetter", err)
		}
		if v, _ := f.srv.Queue("tasks"); v.InFlight != 1 {
			t.Errorf("message not left in flight for the redrive policy: %+v", v)
		}
	})
	t.Run("with dlq", func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t)
		q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
		defer q.Close(ctx)
		attrs := map[string]string{}
		for i := range 10 { // SQS's maximum: one more than fit with the reason
			attrs[fmt.Sprintf("a%02d", i)] = fmt.Sprint(i)
		}
		f.send(t, `{"broken`, attrs)
		m := receiveN(t, q, 1)[0]
		if err := q.DeadLetter(ctx, m, "malformed JSON"); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
		if v, _ := f.srv.Queue("tasks"); !v.Empty() || v.Stats.Deleted != 1 {
			t.Errorf("source queue after DeadLetter: %+v", v.Stats)
		}
		v, _ := f.srv.Queue("tasks-dlq")
		if len(v.Messages) != 1 {
			t.Fatalf("DLQ holds %d messages, want 1", len(v.Messages))
		}
		dm := v.Messages[0]
		if dm.Body != `{"broken` || dm.Attributes[queue.RejectReasonAttribute].StringValue != "malformed JSON" {
			t.Errorf("DLQ message = %+v", dm)
		}
		if len(dm.Attributes) != 10 {
			t.Errorf("DLQ message has %d attributes, want the SQS maximum 10", len(dm.Attributes))
		}
		for i := range 9 {
			k := fmt.Sprintf("a%02d", i)
			if dm.Attributes[k].StringValue != fmt.Sprint(i) {
				t.Errorf("attribute %s = %+v, want copied", k, dm.Attributes[k])
			}
		}
	})
}

func TestSQSSend(t *testing.T) {
	f := newFixture(t)
	q := f.source(queue.SQSOptions{})
	id, err := q.Send(context.Background(), []byte(`{"id":"x"}`))
	if err != nil || id == "" {
		t.Fatalf("Send = %q, %v", id, err)
	}
	v, _ := f.srv.Queue("tasks")
	if len(v.Messages) != 1 || v.Messages[0].ID != id || v.Messages[0].Body != `{"id":"x"}` {
		t.Errorf("queue = %+v", v.Messages)
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(context.Background(), []byte("y")); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}

// TestSQSThrottlingRetriedBySDK: throttling and 5xx answers are retried by
// the SDK's standard retryer under one invocation id; past its 3 attempts
// the throttle reaches the caller as a typed API error.
func TestSQSThrottlingRetriedBySDK(t *testing.T) {
	tests := []struct {
		name     string
		fault    sqsfake.Fault
		op       func(*testing.T, *queue.SQS, *fixture) error
		attempts int
		wantErr  string // error code; "" = success
	}{
		{
			name:  "receive throttled twice",
			fault: sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultThrottle, Count: 2},
			op: func(t *testing.T, q *queue.SQS, f *fixture) error {
				_, err := q.Receive(t.Context(), 1)
				return err
			},
			attempts: 3,
		},
		{
			name:  "modeled RequestThrottled on send",
			fault: sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle, Count: 1, Code: "RequestThrottled"},
			op: func(t *testing.T, q *queue.SQS, f *fixture) error {
				_, err := q.Send(t.Context(), []byte("x"))
				return err
			},
			attempts: 2,
		},
		{
			name:  "delete batch 500 once",
			fault: sqsfake.Fault{Op: "DeleteMessageBatch", Kind: sqsfake.FaultServerError, Count: 1},
			op: func(t *testing.T, q *queue.SQS, f *fixture) error {
				f.send(t, "a", nil)
				return q.Delete(t.Context(), receiveN(t, q, 1)[0])
			},
			attempts: 2,
		},
		{
			name:  "change visibility throttled for good",
			fault: sqsfake.Fault{Op: "ChangeMessageVisibility", Kind: sqsfake.FaultThrottle},
			op: func(t *testing.T, q *queue.SQS, f *fixture) error {
				f.send(t, "a", nil)
				return q.ChangeVisibility(t.Context(), receiveN(t, q, 1)[0], time.Minute)
			},
			attempts: 3,
			wantErr:  "ThrottlingException",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t)
			q := f.source(queue.SQSOptions{DeleteBatchWindow: time.Millisecond})
			defer q.Close(ctx)
			f.srv.InjectFault(tc.fault)
			err := tc.op(t, q, f)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("op = %v, want success after SDK retries", err)
			}
			if tc.wantErr != "" {
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != tc.wantErr {
					t.Fatalf("op = %v, want API error %s", err, tc.wantErr)
				}
			}
			calls := f.srv.Calls(tc.fault.Op)
			if len(calls) != tc.attempts {
				t.Fatalf("%d %s requests, want %d", len(calls), tc.fault.Op, tc.attempts)
			}
			for i, c := range calls {
				if c.InvocationID != calls[0].InvocationID || c.Attempt != i+1 {
					t.Errorf("request %d: invocation %s attempt %d; want one SDK call retried", i, c.InvocationID, c.Attempt)
				}
			}
		})
	}
}

// TestSQSRetryQuota: the standard retryer's client-wide retry bucket (500
// tokens, 5 per throttled retry, 14 per other retry) runs dry under
// sustained failure and the SDK then fails at once with "retry quota
// exceeded" instead of retrying. A small bucket shows it quickly.
func TestSQSRetryQuota(t *testing.T) {
	f := newFixture(t, func(o *sqs.Options) {
		o.Retryer = retryWithBucket(6) // one throttled retry (5 tokens), then dry
	})
	q := f.source(queue.SQSOptions{})
	defer q.Close(context.Background())
	f.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle})
	// First Send: attempt 1, a throttled retry (5 tokens), attempt 2, then
	// no quota for another. Second Send: attempt 1 only.
	for i, wantCalls := range []int{2, 3} {
		_, err := q.Send(context.Background(), []byte("a"))
		var qe ratelimit.QuotaExceededError
		var ae smithy.APIError
		if !errors.As(err, &qe) || !errors.As(err, &ae) || ae.ErrorCode() != "ThrottlingException" {
			t.Fatalf("Send %d = %v, want the throttle joined with retry quota exceeded", i+1, err)
		}
		if n := len(f.srv.Calls("SendMessage")); n != wantCalls {
			t.Errorf("after Send %d: %d SendMessage requests, want %d", i+1, n, wantCalls)
		}
	}
}

func retryWithBucket(tokens uint) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.RateLimiter = ratelimit.NewTokenRateLimit(tokens)
	})
}
