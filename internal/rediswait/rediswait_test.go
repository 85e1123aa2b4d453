package rediswait

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDo: the caller waits for a call until its context ends, and the
// call, left on its goroutine, still ends with its answer.
func TestDo(t *testing.T) {
	cases := []struct {
		name     string
		direct   bool
		answerIn time.Duration // when the call answers
		want     int
		wantErr  error
		waited   time.Duration
	}{
		{"answer in time", false, 50 * time.Millisecond, 7, nil, 50 * time.Millisecond},
		{"answer late: given up at the deadline", false, 300 * time.Millisecond, 0, ErrNoReply, 200 * time.Millisecond},
		{"direct: the call itself ends at the deadline", true, 300 * time.Millisecond, 0, context.DeadlineExceeded, 200 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				ended := make(chan error, 1)
				start := time.Now()
				got, err := Do(ctx, Waiter{direct: tc.direct}, func(ctx context.Context) (int, error) {
					// A client that cuts at the deadline (direct) stops there;
					// one that does not reads its late answer.
					t := time.NewTimer(tc.answerIn)
					defer t.Stop()
					if tc.direct {
						select {
						case <-t.C:
						case <-ctx.Done():
							ended <- ctx.Err()
							return 0, ctx.Err()
						}
					} else {
						<-t.C
					}
					ended <- nil
					return 7, nil
				})
				if waited := time.Since(start); waited != tc.waited {
					t.Errorf("waited %s, want %s", waited, tc.waited)
				}
				if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
					t.Errorf("Do = %d, %v; want %d, %v", got, err, tc.want, tc.wantErr)
				}
				late := errors.Is(tc.wantErr, ErrNoReply)
				if late && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%v does not say the deadline passed", err)
				}
				// The call ends on its own, answered.
				if err := <-ended; !tc.direct && err != nil {
					t.Errorf("call ended with %v", err)
				}
				if late && time.Since(start) != tc.answerIn {
					t.Errorf("call ended after %s, want %s", time.Since(start), tc.answerIn)
				}
			})
		})
	}
}

// TestDoWithoutDeadline: a context that never ends is waited for on the
// caller's goroutine.
func TestDoWithoutDeadline(t *testing.T) {
	inCall := make(chan struct{})
	got, err := Do(context.Background(), Waiter{}, func(context.Context) (int, error) { close(inCall); return 1, nil })
	if got != 1 || err != nil {
		t.Fatalf("Do = %d, %v", got, err)
	}
	<-inCall
}

func TestHonoursDeadlines(t *testing.T) {
	cases := []struct {
		c    any
		want bool
	}{
		{redis.NewClient(&redis.Options{ContextTimeoutEnabled: true}), true},
		{redis.NewClient(&redis.Options{}), false},
		{redis.NewClusterClient(&redis.ClusterOptions{ContextTimeoutEnabled: true}), true},
		{redis.NewRing(&redis.RingOptions{}), false},
		{nil, false},
	}
	for i, tc := range cases {
		if got := HonoursDeadlines(tc.c); got != tc.want {
			t.Errorf("case %d (%T): %v, want %v", i, tc.c, got, tc.want)
		}
		if c, ok := tc.c.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
}

// goroutineID is the id of the calling goroutine, from its stack's first
// line ("goroutine N [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// TestHelpersReuseGoroutines: For's Waiter runs a call on the goroutine
// that ran the one before, while it came within HelperIdle; calls at
// once run on goroutines of their own; a helper idle for HelperIdle ends
// (and the bubble ends with none left). The zero Waiter starts one per
// call.
func TestHelpersReuseGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		on := func(w Waiter) string {
			id, err := Do(ctx, w, func(context.Context) (string, error) { return goroutineID(), nil })
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		w := For(nil) // a client that does not cut calls at their deadline
		first := on(w)
		if first == goroutineID() {
			t.Fatal("the call ran on its caller's goroutine")
		}
		synctest.Wait() // the helper is idle
		if again := on(w); again != first {
			t.Errorf("the next call ran on goroutine %s, want the idle helper %s", again, first)
		}

		// Two calls at once: the second cannot wait for the first.
		release := make(chan struct{})
		ids := make(chan string, 2)
		for range 2 {
			go func() {
				_, err := Do(ctx, w, func(context.Context) (string, error) {
					ids <- goroutineID()
					<-release
					return "", nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		a, b := <-ids, <-ids
		close(release)
		if a == b {
			t.Errorf("two calls at once ran on one goroutine %s", a)
		}
		synctest.Wait()

		time.Sleep(HelperIdle + time.Millisecond)
		synctest.Wait()
		if later := on(w); later == first || later == a || later == b {
			t.Errorf("a call after HelperIdle ran on goroutine %s, which should have ended", later)
		}

		var zero Waiter
		if x, y := on(zero), on(zero); x == y {
			t.Errorf("the zero Waiter ran two calls on goroutine %s", x)
		}
		// A bubble's clock stops once its function returns: the idle
		// helper ends within it.
		time.Sleep(HelperIdle)
	})
}
