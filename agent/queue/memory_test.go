package queue

import (
	"context"
	"errors"
	"testing"
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
	q.Send(ctx, []byte("x"))
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
	q.Send(ctx, []byte("bad"))
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
