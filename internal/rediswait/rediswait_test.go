package rediswait

import (
	"context"
	"errors"
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
				got, err := Do(ctx, tc.direct, func(ctx context.Context) (int, error) {
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
	got, err := Do(context.Background(), false, func(context.Context) (int, error) { close(inCall); return 1, nil })
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
