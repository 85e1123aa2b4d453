package limiter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/rediswait"
)

// TestBoundedAfterPause: a decision whose call ended after more than twice
// the timeout (the process was stopped while it waited) is made once more
// before the timeout counts as an outage; a Redis that does not answer
// times out once (errTimeout: the breaker and the fail mode decide); and
// a caller's deadline that passed while the process was stopped, its
// timer not yet fired, ends the call as the caller's, not as an outage.
func TestBoundedAfterPause(t *testing.T) {
	const timeout = time.Second
	synctest.Test(t, func(t *testing.T) {
		n := 0
		v, err := bounded(context.Background(), timeout, rediswait.OnCaller(), "allow.lua", func(ctx context.Context) (int, error) {
			n++
			if n == 1 {
				time.Sleep(clock.StoppedAfter*timeout + time.Millisecond) // stopped mid-call
				return 0, ctx.Err()
			}
			return 7, nil
		})
		if v != 7 || err != nil || n != 2 {
			t.Fatalf("after a pause: %d, %v, %d calls; want 7, nil after 2", v, err, n)
		}

		n = 0
		_, err = bounded(context.Background(), timeout, rediswait.OnCaller(), "allow.lua", func(ctx context.Context) (int, error) {
			n++
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, errTimeout) || n != 1 {
			t.Fatalf("no answer: %v, %d calls; want errTimeout after 1", err, n)
		}

		parent, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		n = 0
		_, err = bounded(parent, timeout, rediswait.OnCaller(), "allow.lua", func(ctx context.Context) (int, error) {
			n++
			time.Sleep(5 * timeout) // stopped past the caller's deadline too
			return 0, ctx.Err()
		})
		if errors.Is(err, errTimeout) || !errors.Is(err, context.DeadlineExceeded) || n != 1 {
			t.Fatalf("caller's deadline passed: %v, %d calls; want the caller's DeadlineExceeded, not errTimeout, after 1", err, n)
		}
	})
}
