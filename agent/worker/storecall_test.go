package worker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
)

// TestStoreCallAfterPause: a store call that ends after more than twice
// redis.timeout (the process was stopped while it waited, and its deadline
// passed meanwhile) is made once more before its error counts; a call that
// times out at the timeout, as against a store that does not answer, is
// made once.
func TestStoreCallAfterPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &storeCalls{timeout: time.Second}
		n := 0
		err := sc.storeCall(func(ctx context.Context) error {
			n++
			if n == 1 {
				// Stopped mid-call: the fake clock runs past the deadline.
				time.Sleep(clock.StoppedAfter*sc.timeout + time.Millisecond)
				return ctx.Err()
			}
			return nil
		})
		if err != nil || n != 2 {
			t.Fatalf("after a pause: err %v, %d calls; want nil after 2", err, n)
		}
		n = 0
		err = sc.storeCall(func(ctx context.Context) error {
			n++
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || n != 1 {
			t.Fatalf("a store that does not answer: err %v, %d calls; want the deadline after 1", err, n)
		}
	})
}
