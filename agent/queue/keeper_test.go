package queue_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// inProcess is an HTTP client that serves requests with a handler in the
// calling goroutine: no sockets, so the real SDK client works inside a
// testing/synctest bubble.
type inProcess struct{ h http.Handler }

func (c inProcess) Do(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// warnings records the messages of warnings logged.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// none fails t if anything was logged at WARN or above.
func (w *warnings) none(t *testing.T) {
	t.Helper()
	if warns := w.all(); len(warns) != 0 {
		t.Errorf("warnings: %q", warns)
	}
}

// bubbleFixture is an sqsfake server and an SDK client of it, in process,
// for tests inside a synctest bubble; the task queue has visibility vis.
func bubbleFixture(t *testing.T, vis time.Duration) (*sqsfake.Server, *sqs.Client, string) {
	srv := sqsfake.New()
	srv.SetBaseURL("http://sqs.test")
	t.Cleanup(srv.Close)
	cfg := sqsfake.SDKConfig("http://sqs.test")
	cfg.HTTPClient = inProcess{srv}
	client := sqs.NewFromConfig(cfg)
	url, err := srv.CreateQueue("tasks", map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client, url
}

// TestSQSHoldKeepsQueuedMessages: one consumer receives messages ahead of
// its single worker, which runs each for 9 s with a 4 s visibility
// timeout. Held, none lapses while it waits: every message is received
// once, deleted with its only handle, and no extension fails.
func TestSQSHoldKeepsQueuedMessages(t *testing.T) {
	const (
		vis     = 4 * time.Second
		run     = 9 * time.Second
		pending = 3
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv, q, w := sentFixture(t, vis, pending)
		received := time.Now()
		ms, err := q.Receive(ctx, pending)
		if err != nil || len(ms) != pending {
			t.Fatalf("Receive = %d messages, %v; want %d", len(ms), err, pending)
		}
		var releases []func()
		for _, m := range ms {
			releases = append(releases, q.Hold(m))
		}

		// The consumer keeps polling while its worker is busy: a message
		// whose visibility lapsed would be received again here.
		pollCtx, stopPolling := context.WithCancel(ctx)
		var again []*queue.Message
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for pollCtx.Err() == nil {
				got, _ := q.Receive(pollCtx, 10)
				again = append(again, got...)
			}
		}()
		for i, m := range ms {
			time.Sleep(run) // the worker runs the task, in bubble time
			if err := q.Delete(ctx, m); err != nil {
				t.Errorf("Delete: %v", err)
			}
			releases[i]() // a no-op after Delete
		}
		stopPolling()
		<-polled
		if len(again) != 0 {
			t.Errorf("%d messages received again while held", len(again))
		}
		checkDeletedOnce(t, srv, pending)
		calls := srv.Calls("ChangeMessageVisibilityBatch")
		if len(calls) == 0 {
			t.Error("no ChangeMessageVisibilityBatch calls")
		}
		for i, c := range calls {
			if c.Status != 200 || c.Failed != 0 || c.N > 10 {
				t.Errorf("extension call: status %d, %d of %d entries failed", c.Status, c.Failed, c.N)
			}
			// One batch for all three, every third of the timeout from
			// the receive, while the first task runs.
			if at := received.Add(time.Duration(i+1) * (vis / 3)); at.Before(received.Add(run)) && (!c.Time.Equal(at) || c.N != pending) {
				t.Errorf("extension %d at %v with %d entries, want at %v with %d", i+1, c.Time.Sub(received), c.N, at.Sub(received), pending)
			}
		}
		w.none(t)
		if err := q.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if n := q.Held(); n != 0 {
			t.Errorf("%d messages still held", n)
		}
	})
}

// TestSQSHoldRetriesFailedEntries: an extension entry that fails with a
// server fault is tried again before the visibility lapses, and held
// messages beyond 10 go in further batches.
func TestSQSHoldRetriesFailedEntries(t *testing.T) {
	const vis = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv, client, url := bubbleFixture(t, vis)
		q := queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: time.Second, VisibilityTimeout: vis})
		defer q.Close(ctx)
		var ms []*queue.Message
		for range 12 {
			if _, err := q.Send(ctx, []byte("task")); err != nil {
				t.Fatal(err)
			}
		}
		for len(ms) < 12 {
			got, err := q.Receive(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, got...)
		}
		for _, m := range ms {
			q.Hold(m)
		}
		srv.InjectFault(sqsfake.Fault{Op: "ChangeMessageVisibilityBatch", Kind: sqsfake.FaultBatchEntryError, Count: 3})
		time.Sleep(5 * vis)
		if got, _ := q.Receive(ctx, 10); len(got) != 0 {
			t.Fatalf("%d held messages lapsed and were received again", len(got))
		}
		failed := 0
		for _, c := range srv.Calls("ChangeMessageVisibilityBatch") {
			if c.N > 10 {
				t.Errorf("batch of %d entries", c.N)
			}
			failed += c.Failed
		}
		if failed != 3 {
			t.Errorf("%d failed entries, want the 3 injected", failed)
		}
		for _, m := range ms {
			if err := q.Delete(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if v, _ := srv.Queue("tasks"); v.Stats.Deleted != 12 || v.Stats.StaleDeletes != 0 {
			t.Errorf("queue stats %+v, want 12 deleted, none stale", v.Stats)
		}
	})
}

// TestSQSHoldOfAHandedMessage: one agent receives a message and hands it,
// receipt handle and receive time, to another (the host's agent), which
// holds it after a hand-off that took longer than two thirds of the
// visibility timeout. The holder extends it at once, counting from the
// first agent's receive rather than from its own hold, so it never lapses
// and is never received again while the holder keeps it; it is deleted
// with the handed handle.
func TestSQSHoldOfAHandedMessage(t *testing.T) {
	const (
		vis = 3 * time.Second
		// The hand-off's time in transit: past the first extension a
		// hold of its own would schedule (vis/3 later), within the
		// visibility the receive gave.
		transit = vis - vis/6
		held    = 4 * vis
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv, client, url := bubbleFixture(t, vis)
		w := &warnings{}
		from := queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: time.Second, VisibilityTimeout: vis})
		owner := queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: time.Second, VisibilityTimeout: vis, Logger: slog.New(w)})
		if _, err := from.Send(ctx, []byte("task")); err != nil {
			t.Fatal(err)
		}
		received := time.Now()
		ms, err := from.Receive(ctx, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Receive = %d messages, %v; want 1", len(ms), err)
		}
		time.Sleep(transit)
		m := ms[0]
		release := owner.Hold(&queue.Message{ID: m.ID, Body: m.Body, Handle: m.Handle, ReceivedAt: received})

		// The first agent keeps polling: a lapsed message comes back here.
		pollCtx, stopPolling := context.WithCancel(ctx)
		var again []*queue.Message
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for pollCtx.Err() == nil {
				got, _ := from.Receive(pollCtx, 10)
				again = append(again, got...)
			}
		}()
		time.Sleep(held)
		stopPolling()
		<-polled
		if len(again) != 0 {
			t.Errorf("the handed message was received again %d times while its owner held it", len(again))
		}
		calls := srv.Calls("ChangeMessageVisibilityBatch")
		if len(calls) == 0 || !calls[0].Time.Equal(received.Add(transit)) {
			t.Errorf("extensions %+v; want the first at the hold, %s after the receive", calls, transit)
		}
		if err := owner.Delete(ctx, &queue.Message{ID: m.ID, Handle: m.Handle}); err != nil {
			t.Fatal(err)
		}
		release()
		if err := owner.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_ = from.Close(ctx)
		checkDeletedOnce(t, srv, 1) // with its handed handle
		w.none(t)
	})
}

// TestSQSHoldSharesCalls: messages received and held a little apart (an
// agent's handed tasks waiting for its workers) share one extension call
// per third of the visibility timeout once the first of them is due,
// rather than one call each: over the run at most one call per interval.
// None lapses meanwhile: each is received once and deleted with its
// handle.
func TestSQSHoldSharesCalls(t *testing.T) {
	const (
		vis      = 30 * time.Second
		interval = vis / 3
		pending  = 4
		apart    = interval / 8 // the holds' spacing: all within interval/2
		run      = 6 * interval
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv, q, w := sentFixture(t, vis, pending)
		start := time.Now()
		var ms []*queue.Message
		var releases []func()
		for range pending {
			got, err := q.Receive(ctx, 1)
			if err != nil || len(got) != 1 {
				t.Fatalf("Receive = %d messages, %v; want 1", len(got), err)
			}
			ms = append(ms, got[0])
			releases = append(releases, q.Hold(got[0]))
			time.Sleep(apart)
		}
		time.Sleep(run - time.Since(start))
		calls := srv.Calls("ChangeMessageVisibilityBatch")
		if most := int(run / interval); len(calls) == 0 || len(calls) > most {
			t.Errorf("%d extension calls over %s; want 1 to %d, one per third of the visibility timeout", len(calls), run, most)
		}
		// A message that lapsed is visible again: a receive would get it.
		if again, err := q.Receive(ctx, 10); err != nil || len(again) != 0 {
			t.Errorf("Receive while held = %d messages, %v; want none: a held message lapsed", len(again), err)
		}
		for i, m := range ms {
			if err := q.Delete(ctx, m); err != nil {
				t.Fatal(err)
			}
			releases[i]()
		}
		if err := q.Close(ctx); err != nil {
			t.Fatal(err)
		}
		checkDeletedOnce(t, srv, pending)
		w.none(t)
	})
}

// TestSQSHoldCountsFromTheAnswer: a message that a long poll waited for
// is in flight from the poll's answer, not from its start: its first
// extension is due a third of the visibility timeout after the answer,
// not at once when the wait was longer than that (a call that a task
// handed on or deferred at once never needs).
func TestSQSHoldCountsFromTheAnswer(t *testing.T) {
	const (
		vis      = 30 * time.Second
		interval = vis / 3
		poll     = 20 * time.Second
		arrives  = poll - time.Second // past interval: an extension due from the poll's start is late already
		held     = 2 * interval
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv, client, url := bubbleFixture(t, vis)
		q := queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: poll, VisibilityTimeout: vis})
		go func() {
			time.Sleep(arrives)
			if _, err := q.Send(ctx, []byte("task")); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		ms, err := q.Receive(ctx, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Receive = %d messages, %v; want 1", len(ms), err)
		}
		answered := time.Now()
		if answered.Sub(start) != arrives {
			t.Fatalf("the poll answered after %s, want %s", answered.Sub(start), arrives)
		}
		release := q.Hold(ms[0])
		time.Sleep(held)
		var at []time.Duration
		for _, c := range srv.Calls("ChangeMessageVisibilityBatch") {
			at = append(at, c.Time.Sub(answered))
		}
		if len(at) == 0 || at[0] != interval {
			t.Errorf("extensions at %v after the answer; want the first a third of the visibility timeout (%s) after it", at, interval)
		}
		if err := q.Delete(ctx, ms[0]); err != nil {
			t.Fatal(err)
		}
		release()
		if err := q.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// checkDeletedOnce: the queue "tasks" is empty, its want messages were
// each received once and deleted once, none with a stale handle.
func checkDeletedOnce(t *testing.T, srv *sqsfake.Server, want int) {
	t.Helper()
	v, _ := srv.Queue("tasks")
	if !v.Empty() || v.Stats.Deleted != want || v.Stats.StaleDeletes != 0 {
		t.Errorf("queue stats %+v, want %d deleted, none stale", v.Stats, want)
	}
	for _, h := range v.History {
		if h.ReceiveCount != 1 {
			t.Errorf("message %s received %d times, want 1", h.ID, h.ReceiveCount)
		}
	}
}

// sentFixture is bubbleFixture's server with n messages sent to "tasks",
// and a queue over it (1 s polls) whose warnings w collects.
func sentFixture(t *testing.T, vis time.Duration, n int) (*sqsfake.Server, *queue.SQS, *warnings) {
	t.Helper()
	srv, client, url := bubbleFixture(t, vis)
	w := &warnings{}
	q := queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: time.Second, VisibilityTimeout: vis, Logger: slog.New(w)})
	for range n {
		if _, err := q.Send(context.Background(), []byte("task")); err != nil {
			t.Fatal(err)
		}
	}
	return srv, q, w
}
