package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
)

// failingSource is a queue whose Receive always fails; it records when.
type failingSource struct {
	queue.Source
	mu    sync.Mutex
	calls []time.Time
}

func (f *failingSource) Receive(context.Context, int) ([]*queue.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, time.Now())
	return nil, errors.New("receive: 500 internal error")
}

// TestIntakeBacksOffOnReceiveErrors: a failing queue is polled after
// growing, jittered pauses capped near receiveRetryMax, not every second.
func TestIntakeBacksOffOnReceiveErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := &failingSource{}
		in := &intake{src: src, slots: semaphore.NewWeighted(2), batch: 10, log: slog.New(slog.DiscardHandler),
			accept: func(*queue.Message) { t.Error("accept without a message") }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); in.run(ctx) }()
		time.Sleep(10 * time.Minute)
		cancel()
		<-done

		// The backoff's jitter spreads each pause by ±50%.
		const jitter = 0.5
		maxPause := time.Duration(float64(receiveRetryMax) * (1 + jitter))
		if n := len(src.calls); n < 10 || n > 60 {
			t.Fatalf("%d receives in 10 minutes of failures, want a backoff between 1s and %v", n, receiveRetryMax)
		}
		var longest time.Duration
		for i := 1; i < len(src.calls); i++ {
			gap := src.calls[i].Sub(src.calls[i-1])
			if gap > maxPause {
				t.Fatalf("pause %d = %v, above the cap %v", i, gap, maxPause)
			}
			longest = max(longest, gap)
		}
		if first := src.calls[1].Sub(src.calls[0]); first > time.Duration(float64(receiveRetryInitial)*(1+jitter)) {
			t.Fatalf("first pause %v, want about %v", first, receiveRetryInitial)
		}
		if longest < receiveRetryMax/2 {
			t.Fatalf("longest pause %v: the backoff never grew towards %v", longest, receiveRetryMax)
		}
	})
}
