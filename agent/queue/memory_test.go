package queue

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestMemoryVisibilityAndRedelivery(t *testing.T) {
	q := NewMemory(MemoryOptions{Visibility: 50 * time.Millisecond, Wait: 5 * time.Second})
	ctx := context.Background()
	if _, err := q.Send(ctx, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	first, err := q.Receive(ctx, 10)
	if err != nil || len(first) != 1 || first[0].ReceiveCount != 1 {
		t.Fatalf("first receive = %v, %v", first, err)
	}
	// Hidden now; comes back after its visibility with a new handle.
	again, err := q.Receive(ctx, 10)
	if err != nil || len(again) != 1 || again[0].ReceiveCount != 2 || again[0].Handle == first[0].Handle {
		t.Fatalf("redelivery = %+v, %v", again, err)
	}
	// A delete with the stale handle deletes nothing.
	if err := q.Delete(ctx, first[0]); err != nil {
		t.Fatal(err)
	}
	if ready, inflight := q.Len(); ready+inflight != 1 {
		t.Fatalf("stale delete removed the message: ready=%d inflight=%d", ready, inflight)
	}
	if err := q.ChangeVisibility(ctx, first[0], time.Minute); err == nil {
		t.Fatal("ChangeVisibility with a stale handle succeeded")
	}
	if err := q.Delete(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
	if ready, inflight := q.Len(); ready+inflight != 0 {
		t.Fatalf("after delete: ready=%d inflight=%d", ready, inflight)
	}
}

func TestMemoryChangeVisibilityWakesReceiver(t *testing.T) {
	q := NewMemory(MemoryOptions{Visibility: time.Hour, Wait: 10 * time.Second})
	ctx := context.Background()
	if _, err := q.Send(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	msgs, _ := q.Receive(ctx, 1)
	got := make(chan []*Message, 1)
	go func() { m, _ := q.Receive(ctx, 1); got <- m }()
	// Released (visibility 0) or shortened: the waiting receiver must see it
	// without waiting out its long poll or the old hour.
	if err := q.ChangeVisibility(ctx, msgs[0], 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if len(m) != 1 || m[0].ReceiveCount != 2 {
			t.Fatalf("receive = %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a shortened visibility did not wake the waiting receiver")
	}
}

func TestMemoryReceiveCancelAndClose(t *testing.T) {
	q := NewMemory(MemoryOptions{Wait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := q.Receive(ctx, 1); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive after cancel = %v", err)
	}
	q.Close(context.Background())
	if _, err := q.Receive(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Close = %v", err)
	}
	if _, err := q.Send(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
}

func TestMemoryDeadLetterAndCapacity(t *testing.T) {
	q := NewMemory(MemoryOptions{Capacity: 1, Wait: time.Second})
	ctx := context.Background()
	if _, err := q.Send(ctx, []byte("bad")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, []byte("more")); !errors.Is(err, ErrFull) {
		t.Fatalf("Send past capacity = %v", err)
	}
	m, _ := q.Receive(ctx, 1)
	if err := q.DeadLetter(ctx, m[0], "malformed_json"); err != nil {
		t.Fatal(err)
	}
	dl := q.DeadLetters()
	if len(dl) != 1 || dl[0].Reason != "malformed_json" || string(dl[0].Message.Body) != "bad" {
		t.Fatalf("dead letters = %+v", dl)
	}
	if ready, inflight := q.Len(); ready+inflight != 0 {
		t.Fatal("dead-lettered message still in the queue")
	}
}

// TestMemoryDeferKeepsBudget: with a redrive policy, a message deferred
// more times than MaxReceiveCount is never dead-lettered and keeps its id;
// handing it back with ChangeVisibility dead-letters it as SQS would.
func TestMemoryDeferKeepsBudget(t *testing.T) {
	const maxReceive = 3
	ctx := context.Background()
	tests := []struct {
		name    string
		handOff func(*Memory, *Message) error
		wantDLQ bool
	}{
		{"defer", func(q *Memory, m *Message) error { return q.Defer(ctx, m, 0) }, false},
		{"change visibility spends the budget", func(q *Memory, m *Message) error { return q.ChangeVisibility(ctx, m, 0) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := NewMemory(MemoryOptions{Wait: 10 * time.Millisecond, MaxReceiveCount: maxReceive})
			id, _ := q.Send(ctx, []byte("a"))
			rounds := 0
			for ; rounds < 3*maxReceive; rounds++ {
				ms, err := q.Receive(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) == 0 {
					break
				}
				if ms[0].ID != id || (!tc.wantDLQ && ms[0].ReceiveCount > maxReceive-deferReserve) {
					t.Fatalf("round %d: %+v, want id %s received at most %d times", rounds, ms[0], id, maxReceive-deferReserve)
				}
				if err := tc.handOff(q, ms[0]); err != nil {
					t.Fatal(err)
				}
			}
			dl := q.DeadLetters()
			if tc.wantDLQ {
				if rounds != maxReceive || len(dl) != 1 || dl[0].Message.ID != id {
					t.Errorf("received %d times, dead letters %+v; want %d and the message", rounds, dl, maxReceive)
				}
				return
			}
			if rounds != 3*maxReceive || len(dl) != 0 {
				t.Errorf("received %d times, dead letters %+v; want %d and none", rounds, dl, 3*maxReceive)
			}
		})
	}
}

// TestMemoryDeferDelay: a re-sent message waits min(delay, 15 min); one
// deferred by ChangeVisibility waits the whole delay.
func TestMemoryDeferDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for _, tc := range []struct {
			maxReceive int
			want       time.Duration
		}{{1, 15 * time.Minute}, {0, 30 * time.Minute}} {
			q := NewMemory(MemoryOptions{Wait: time.Second, MaxReceiveCount: tc.maxReceive})
			if _, err := q.Send(ctx, []byte("a")); err != nil {
				t.Fatal(err)
			}
			ms, _ := q.Receive(ctx, 1)
			if err := q.Defer(ctx, ms[0], 30*time.Minute); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for {
				ms, _ := q.Receive(ctx, 1)
				if len(ms) == 1 {
					break
				}
			}
			if got := time.Since(start); got < tc.want || got > tc.want+time.Second {
				t.Errorf("maxReceiveCount %d: back after %v, want %v", tc.maxReceive, got, tc.want)
			}
		}
	})
}

// TestMemoryHold: a held message stays hidden past its visibility until it
// is released, then lapses as usual.
func TestMemoryHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewMemory(MemoryOptions{Visibility: 4 * time.Second, Wait: time.Second})
		if _, err := q.Send(ctx, []byte("a")); err != nil {
			t.Fatal(err)
		}
		ms, _ := q.Receive(ctx, 1)
		release := q.Hold(ms[0])
		time.Sleep(9 * time.Second) // bubble time
		if again, _ := q.Receive(ctx, 1); len(again) != 0 {
			t.Fatalf("held message received again: %+v", again[0])
		}
		release()
		time.Sleep(4 * time.Second)
		again, _ := q.Receive(ctx, 1)
		if len(again) != 1 || again[0].ReceiveCount != 2 {
			t.Fatalf("after release = %+v, want the message back", again)
		}
		if err := q.Delete(ctx, again[0]); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMemorySealReceivesWhatIsVisible: Seal hands back every visible
// message, received (a handle, one receive more), leaves those in flight
// alone, and from then on Send and Receive fail with ErrClosed while
// acknowledging still works.
func TestMemorySealReceivesWhatIsVisible(t *testing.T) {
	ctx := context.Background()
	q := NewMemory(MemoryOptions{Wait: time.Millisecond})
	for _, b := range []string{"a", "b", "c"} {
		if _, err := q.Send(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := q.Receive(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("Receive = %d, %v", len(got), err)
	}
	sealed := q.Seal()
	if len(sealed) != 2 || string(sealed[0].Body) != "b" || sealed[0].Handle == "" || sealed[0].ReceiveCount != 1 {
		t.Fatalf("Seal = %+v, want b and c, received", sealed)
	}
	if again := q.Seal(); again != nil {
		t.Fatalf("a second Seal = %+v, want nothing", again)
	}
	if _, err := q.Send(ctx, []byte("d")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Seal = %v", err)
	}
	if _, err := q.Receive(ctx, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Seal = %v", err)
	}
	for _, m := range append(got, sealed...) {
		if err := q.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if ready, inflight := q.Len(); ready+inflight != 0 {
		t.Fatalf("after deletes: %d ready, %d in flight", ready, inflight)
	}
}
