package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// stores are the two Stores: memory, and Redis on the test redis-server
// under a prefix of this run's own.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	out := map[string]Store{"memory": NewMemory()}
	if addr := testenv.RedisAddr(t); addr != "" {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		var b [6]byte
		_, _ = rand.Read(b[:])
		out["redis"] = NewRedis(c, "t:"+hex.EncodeToString(b[:])+":")
	}
	return out
}

// The store contract: parked once; decided once (the second decision
// gets the first); due at the deadline or the decision, taken by one
// sweep per SendLease; gone from the due set once sent.
func TestStoreContract(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			t0 := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
			p := Parked{TaskID: "t1", Diagnostic: "heapdump", Host: "web-1", Body: []byte(`{"id":"t1"}`),
				Approval: taskview.Approval{RequestedAt: t0, Deadline: t0.Add(10 * time.Minute)}}
			if _, isNew, err := s.Park(ctx, p); err != nil || !isNew {
				t.Fatalf("Park: new %v err %v", isNew, err)
			}
			p2 := p
			p2.Body = []byte(`other`)
			if got, isNew, err := s.Park(ctx, p2); err != nil || isNew || string(got.Body) != `{"id":"t1"}` {
				t.Fatalf("Park again: new %v body %q err %v, want the first kept", isNew, got.Body, err)
			}
			if ids, err := s.Due(ctx, t0.Add(time.Minute), SendLease, 10); err != nil || len(ids) != 0 {
				t.Fatalf("Due before the deadline: %v %v", ids, err)
			}
			if _, err := s.Decide(ctx, "nope", taskview.Approval{Decision: taskview.ApprovalApproved}, t0); !errors.Is(err, ErrUnknown) {
				t.Fatalf("Decide unknown: %v", err)
			}
			at := t0.Add(2 * time.Minute)
			if _, err := s.Decide(ctx, "t1", taskview.Approval{Decision: taskview.ApprovalApproved, By: "ana", Via: ViaAPI, DecidedAt: &at}, at); err != nil {
				t.Fatal(err)
			}
			if old, err := s.Decide(ctx, "t1", taskview.Approval{Decision: taskview.ApprovalDenied, By: "bo"}, at); !errors.Is(err, ErrDecided) || old.By != "ana" {
				t.Fatalf("second Decide: %+v %v, want ErrDecided with ana's", old, err)
			}
			got, ok, err := s.Get(ctx, "t1")
			if err != nil || !ok || got.Approval.Decision != taskview.ApprovalApproved || got.Approval.By != "ana" || !got.Approval.Deadline.Equal(p.Approval.Deadline) {
				t.Fatalf("Get: %+v %v %v", got, ok, err)
			}
			// Due at the decision; one sweep takes it for SendLease.
			if ids, err := s.Due(ctx, at, SendLease, 10); err != nil || len(ids) != 1 || ids[0] != "t1" {
				t.Fatalf("Due at the decision: %v %v", ids, err)
			}
			if ids, _ := s.Due(ctx, at.Add(SendLease-time.Second), SendLease, 10); len(ids) != 0 {
				t.Fatalf("Due within the lease: %v, want none", ids)
			}
			if ids, _ := s.Due(ctx, at.Add(SendLease), SendLease, 10); len(ids) != 1 {
				t.Fatalf("Due after the lease: %v, want t1 again", ids)
			}
			if w, _ := s.Waiting(ctx, 10); len(w) != 1 {
				t.Fatalf("Waiting: %v", w)
			}
			if err := s.Sent(ctx, "t1"); err != nil {
				t.Fatal(err)
			}
			if w, _ := s.Waiting(ctx, 10); len(w) != 0 {
				t.Fatalf("Waiting after Sent: %v", w)
			}
			if ids, _ := s.Due(ctx, at.Add(time.Hour), SendLease, 10); len(ids) != 0 {
				t.Fatalf("Due after Sent: %v", ids)
			}
			// The decision outlives the send: a redelivery finds it.
			if got, ok, _ := s.Get(ctx, "t1"); !ok || got.Approval.Decision != taskview.ApprovalApproved {
				t.Fatalf("Get after Sent: %+v %v", got, ok)
			}
		})
	}
}

// queueStub is a Send that fails while down is set.
type queueStub struct {
	mu   sync.Mutex
	down bool
	sent []string
}

func (q *queueStub) send(_ context.Context, body []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.down {
		return errors.New("queue unavailable")
	}
	q.sent = append(q.sent, string(body))
	return nil
}

func (q *queueStub) count() int { q.mu.Lock(); defer q.mu.Unlock(); return len(q.sent) }

// A decision whose send fails is not lost: it stands, and a sweep sends
// the task on once the queue answers (a failed try waits SendLease before
// the next); an unanswered task is decided timeout at its deadline
// and sent on, once.
func TestDecisionSurvivesAFailedSend(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewManual(time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC))
			q := &queueStub{down: true}
			var requested []string
			a, err := New(Options{Store: s, Send: q.send, Clock: clk, Requested: func(v taskview.Task) { requested = append(requested, v.ID) }})
			if err != nil {
				t.Fatal(err)
			}
			const timeout = 10 * time.Minute
			for _, id := range []string{"a1", "a2"} {
				ap, err := a.Gate(ctx, task.Task{ID: id, Diagnostic: "heapdump", Host: "web-1"}, []byte(id), timeout)
				if err != nil || ap != nil {
					t.Fatalf("Gate %s: %+v %v, want parked", id, ap, err)
				}
			}
			if ap, err := a.Gate(ctx, task.Task{ID: "a1"}, []byte("a1"), timeout); err != nil || ap != nil || len(requested) != 2 {
				t.Fatalf("Gate again: %+v %v, %d requested events; want still parked, no new event", ap, err, len(requested))
			}
			if err := a.Decide(ctx, "a1", Decision{Approve: true, By: "ana", Via: ViaCLI}); err != nil {
				t.Fatalf("Decide with the queue down: %v, want the decision to stand", err)
			}
			if q.count() != 0 {
				t.Fatal("sent while the queue was down")
			}
			// A sweep takes it at once and fails too: it is due again
			// after SendLease.
			if err := a.Sweep(ctx); err != nil || q.count() != 0 {
				t.Fatalf("sweep with the queue down: %v, %d sent", err, q.count())
			}
			q.mu.Lock()
			q.down = false
			q.mu.Unlock()
			clk.Add(SendLease - time.Second)
			if err := a.Sweep(ctx); err != nil || q.count() != 0 {
				t.Fatalf("sweep within the send lease: %v, %d sent, want none", err, q.count())
			}
			clk.Add(time.Second)
			if err := a.Sweep(ctx); err != nil || q.count() != 1 {
				t.Fatalf("sweep after the lease: %v, %d sent, want a1", err, q.count())
			}
			if ap, _ := a.Gate(ctx, task.Task{ID: "a1"}, []byte("a1"), timeout); !ap.Approved() || ap.By != "ana" || ap.Via != ViaCLI {
				t.Fatalf("Gate of the sent task: %+v, want approved by ana via cli", ap)
			}
			clk.Set(time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC).Add(timeout))
			if err := a.Sweep(ctx); err != nil || q.count() != 2 || q.sent[1] != "a2" {
				t.Fatalf("sweep at a2's deadline: %v, sent %v", err, q.sent)
			}
			if err := a.Sweep(ctx); err != nil || q.count() != 2 {
				t.Fatalf("another sweep: %v, sent %v, want nothing more", err, q.sent)
			}
			if ap, _ := a.Gate(ctx, task.Task{ID: "a2"}, []byte("a2"), timeout); ap == nil || ap.Decision != taskview.ApprovalTimeout {
				t.Fatalf("a2: %+v, want timeout", ap)
			}
			if err := a.Decide(ctx, "a2", Decision{Approve: true, By: "ana", Via: ViaAPI}); !errors.Is(err, ErrDecided) {
				t.Fatalf("late decision: %v, want ErrDecided", err)
			}
		})
	}
}
