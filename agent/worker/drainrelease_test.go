package worker

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// slowDeferSource hands a message back in callTime, as an SQS call takes
// a round trip.
type slowDeferSource struct {
	holdSource
	callTime time.Duration
}

func (s *slowDeferSource) Defer(ctx context.Context, m *queue.Message, d time.Duration) error {
	time.Sleep(s.callTime)
	return s.placeSource.Defer(ctx, m, d)
}

// TestTakeDuringDrainDoesNotRelease: messages taken once a drain (queued:
// release) has begun (a poll answered at its first instant, a batch of
// handed tasks read as it began) are released at once, but not on the
// intake's goroutine one after the other: take returns at once, so the
// intake (which the drain waits for) ends without waiting for a round
// trip per message, and the releases run side by side, all within one
// call's time. Each is handed back once and ends released.
func TestTakeDuringDrainDoesNotRelease(t *testing.T) {
	const (
		batch    = maxHandedRead // the most one read of the hand-off stream takes
		callTime = 200 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		src := &slowDeferSource{callTime: callTime}
		dc := drain.New(drain.Config{Queued: drain.QueuedRelease})
		w, _ := testWorker(t, Options{Source: src, Store: state.NewMemory(state.MemoryOptions{}), Clock: clock.Wall{}, Lease: 30 * time.Second,
			InstanceID: "i-me", Hooks: noHooks{}, Validator: acceptAll{}, Drain: dc})
		p := w.pipeline
		if !dc.Start(drain.Trigger{Source: "test"}) {
			t.Fatal("the drain did not start")
		}
		start := time.Now()
		for i := range batch {
			msg := &queue.Message{ID: fmt.Sprintf("m%d", i), Handle: fmt.Sprintf("rh-%d", i), Body: []byte(fmt.Sprintf(`{"id":"t%d"}`, i))}
			p.take(msg, nil, func() {}, src.Hold(msg))
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("taking %d messages during the drain took %s, want no time: a release (%s each) on the intake holds the drain", batch, took, callTime)
		}
		synctest.Wait()
		if took := time.Since(start); took > callTime {
			t.Errorf("the %d releases took %s, want one call's time %s: they run side by side", batch, took, callTime)
		}
		w.Wait()
		if n := len(src.delays); n != batch {
			t.Errorf("%d handed back, want %d", n, batch)
		}
		for _, d := range src.delays {
			if d != 0 {
				t.Errorf("handed back after %s, want at once", d)
			}
		}
		if got := w.Outcomes()[outcome.Released]; got != batch {
			t.Errorf("%d ended released, want %d", got, batch)
		}
	})
}
