package approval

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

func parkedAt(id string, t0 time.Time) Parked {
	return Parked{TaskID: id, Diagnostic: "heapdump", Host: "web-1", Body: []byte(id),
		Approval: taskview.Approval{RequestedAt: t0, Deadline: t0.Add(10 * time.Minute)}}
}

// The memory store forgets a decided task Keep after its decision once
// it was sent on (a later delivery of its message ends stale before the
// gate), not before, and never one still waiting for a decision or a
// send.
func TestMemoryDropsSentDecisionsAfterKeep(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
	m := NewMemory()
	for _, id := range []string{"sent", "unsent", "waiting"} {
		if _, _, err := m.Park(ctx, parkedAt(id, t0)); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(time.Minute)
	for _, id := range []string{"sent", "unsent"} {
		if _, err := m.Decide(ctx, id, taskview.Approval{Decision: taskview.ApprovalApproved, By: "ana"}, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Sent(ctx, "sent"); err != nil {
		t.Fatal(err)
	}
	has := func(id string) bool { _, ok, _ := m.Get(ctx, id); return ok }
	_, _ = m.Due(ctx, at.Add(DefaultMemoryKeep), SendLease, 10)
	if !has("sent") {
		t.Fatal("dropped at Keep after its decision, want kept until past it")
	}
	_, _ = m.Due(ctx, at.Add(DefaultMemoryKeep+time.Millisecond), SendLease, 10)
	if has("sent") {
		t.Fatal("a task sent on is kept past Keep after its decision, want it dropped")
	}
	if !has("unsent") || !has("waiting") {
		t.Fatalf("unsent %v waiting %v: a task not sent on yet is dropped", has("unsent"), has("waiting"))
	}
}

// At Max tasks the one sent on with the oldest decision makes room; with
// none sent on, Park is ErrFull (the worker hands the message back) and
// nothing held is lost.
func TestMemoryCap(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
	m := NewMemoryWith(MemoryOptions{Max: 2})
	for _, id := range []string{"a", "b"} {
		if _, _, err := m.Park(ctx, parkedAt(id, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Park(ctx, parkedAt("c", t0)); !errors.Is(err, ErrFull) {
		t.Fatalf("Park past Max with nothing sent on: %v, want ErrFull", err)
	}
	if _, err := m.Decide(ctx, "a", taskview.Approval{Decision: taskview.ApprovalDenied, By: "bo"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Park(ctx, parkedAt("c", t0)); !errors.Is(err, ErrFull) {
		t.Fatalf("Park past Max with a decided task not yet sent on: %v, want ErrFull", err)
	}
	_ = m.Sent(ctx, "a")
	if _, isNew, err := m.Park(ctx, parkedAt("c", t0)); err != nil || !isNew {
		t.Fatalf("Park with a sent task to drop: new %v err %v", isNew, err)
	}
	for id, want := range map[string]bool{"a": false, "b": true, "c": true} {
		if _, ok, _ := m.Get(ctx, id); ok != want {
			t.Errorf("%s held %v, want %v", id, ok, want)
		}
	}
}
