package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
)

// redrive gives the task queue a redrive policy to the DLQ.
func (f *fixture) redrive(tb testing.TB, maxReceiveCount int) {
	tb.Helper()
	f.setAttrs(tb, f.url, map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`,
		f.srv.QueueARN("tasks-dlq"), maxReceiveCount)})
}

// TestSQSDeferKeepsDLQBudget: a message deferred (or released at a drain)
// more times than the queue's maxReceiveCount is never dead-lettered by the
// queue and is still receivable, with its id and attributes; handing it
// back with ChangeVisibility instead moves it to the DLQ.
func TestSQSDeferKeepsDLQBudget(t *testing.T) {
	const maxReceive = 3
	ctx := context.Background()
	tests := []struct {
		name    string
		handOff func(*queue.SQS, *queue.Message) error
		wantDLQ bool
	}{
		{"defer", func(q *queue.SQS, m *queue.Message) error { return q.Defer(ctx, m, 0) }, false},
		{"change visibility spends the budget", func(q *queue.SQS, m *queue.Message) error { return q.ChangeVisibility(ctx, m, 0) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t)
			f.redrive(t, maxReceive)
			q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
			defer q.Close(ctx)
			id := f.send(t, `{"host":"a"}`, map[string]string{"source": "zabbix"})
			rounds := 0
			for ; rounds < 3*maxReceive; rounds++ {
				ms, err := q.Receive(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) == 0 {
					break
				}
				m := ms[0]
				if m.ID != id || string(m.Body) != `{"host":"a"}` || m.Attributes["source"] != "zabbix" {
					t.Fatalf("round %d: message %+v, want id %s with its body and attributes", rounds, m, id)
				}
				if !tc.wantDLQ && m.ReceiveCount > maxReceive-queue.DeferReserve {
					t.Errorf("round %d: receive count %d, want at most %d", rounds, m.ReceiveCount, maxReceive-queue.DeferReserve)
				}
				if err := tc.handOff(q, m); err != nil {
					t.Fatalf("round %d: %v", rounds, err)
				}
			}
			dlq, _ := f.srv.Queue("tasks-dlq")
			if tc.wantDLQ {
				if rounds != maxReceive || len(dlq.Messages) != 1 {
					t.Errorf("received %d times, DLQ holds %d; want %d and 1", rounds, len(dlq.Messages), maxReceive)
				}
				return
			}
			if rounds != 3*maxReceive || len(dlq.Messages) != 0 || dlq.Stats.MovedIn != 0 {
				t.Errorf("received %d times, DLQ holds %d; want %d and none", rounds, len(dlq.Messages), 3*maxReceive)
			}
			v, _ := f.srv.Queue("tasks")
			if len(v.Messages) != 1 || v.Visible != 1 {
				t.Fatalf("task queue: %+v, want the one message visible", v.Messages)
			}
			if d, _ := strconv.Atoi(v.Messages[0].Attributes[queue.DeferralsAttribute].StringValue); d < 2 {
				t.Errorf("deferral count %d, want the re-sends counted", d)
			}
			if n := len(f.srv.Calls("GetQueueAttributes")); n != 1 {
				t.Errorf("%d GetQueueAttributes calls, want the redrive policy read once", n)
			}
		})
	}
}

// TestSQSDeferDelay: a deferral by ChangeVisibility hides the message for
// the delay; a re-send delays the new message by at most 15 minutes.
func TestSQSDeferDelay(t *testing.T) {
	tests := []struct {
		name       string
		maxReceive int // 0: no redrive policy
		delay      time.Duration
		wantState  string
		wantIn     time.Duration
		wantSends  int
	}{
		{"no redrive policy", 0, 30 * time.Minute, "inflight", 30 * time.Minute, 1},
		{"far from maxReceiveCount", 10, 30 * time.Minute, "inflight", 30 * time.Minute, 1},
		{"near maxReceiveCount", 2, 30 * time.Minute, "delayed", 15 * time.Minute, 2},
		{"near, short delay", 2, 1500 * time.Millisecond, "delayed", 2 * time.Second, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t)
			if tc.maxReceive > 0 {
				f.redrive(t, tc.maxReceive)
			}
			q := f.source(queue.SQSOptions{})
			defer q.Close(ctx)
			f.send(t, "a", nil)
			m := receiveN(t, q, 1)[0]
			if err := q.Defer(ctx, m, tc.delay); err != nil {
				t.Fatal(err)
			}
			v, _ := f.srv.Queue("tasks")
			if len(v.Messages) != 1 || v.Messages[0].State != tc.wantState {
				t.Fatalf("queue = %+v, want one %s message", v.Messages, tc.wantState)
			}
			if in := time.Until(v.Messages[0].VisibleAt); in > tc.wantIn || in < tc.wantIn-time.Minute/2 {
				t.Errorf("visible in %v, want about %v", in, tc.wantIn)
			}
			if n := f.sends("tasks"); n != tc.wantSends {
				t.Errorf("%d sends to the task queue, want %d", n, tc.wantSends)
			}
		})
	}
}

// TestSQSCopyNeedsCurrentHandle: a consumer whose handle went stale (the
// message was received again since) neither re-sends it nor copies it to
// the DLQ, so no second copy of the task appears.
func TestSQSCopyNeedsCurrentHandle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.redrive(t, 3)
	q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
	defer q.Close(ctx)
	f.send(t, "a", nil)
	var stale *queue.Message
	for range 2 {
		stale = receiveN(t, q, 1)[0]
		if err := q.ChangeVisibility(ctx, stale, 0); err != nil {
			t.Fatal(err)
		}
	}
	current := receiveN(t, q, 1)[0]
	if err := q.Defer(ctx, stale, 0); err == nil {
		t.Error("Defer with a stale handle succeeded")
	}
	if err := q.DeadLetter(ctx, stale, "malformed"); err == nil {
		t.Error("DeadLetter with a stale handle succeeded")
	}
	if n, d := f.sends("tasks"), f.sends("tasks-dlq"); n != 1 || d != 0 {
		t.Errorf("%d sends to the task queue, %d to the DLQ; want only the original", n, d)
	}
	if err := q.Defer(ctx, current, 0); err != nil {
		t.Fatalf("Defer with the current handle: %v", err)
	}
	if v, _ := f.srv.Queue("tasks"); len(v.Messages) != 1 || v.Messages[0].ReceiveCount != 0 {
		t.Errorf("task queue = %+v, want only the re-sent copy", v.Messages)
	}
}
