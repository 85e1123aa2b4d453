package worker

import (
	"testing"
	"time"
)

// TestConcurrencyDelay: a concurrency denial comes back within the denied
// diagnostic's timeout when that is shorter than the holder's lease, in
// the upper half of the bound, never under a second.
func TestConcurrencyDelay(t *testing.T) {
	tests := []struct {
		name                string
		retryAfter, timeout time.Duration
		lo, hi              time.Duration
	}{
		{"timeout shorter than the lease", 5 * time.Minute, 30 * time.Second, 15 * time.Second, 30 * time.Second},
		{"lease shorter than the timeout", 20 * time.Second, time.Minute, 10 * time.Second, 20 * time.Second},
		{"no timeout", 40 * time.Second, 0, 20 * time.Second, 40 * time.Second},
		{"at least a second", time.Second, 500 * time.Millisecond, time.Second, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := concurrencyDelay(tc.retryAfter, tc.timeout)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("concurrencyDelay(%v, %v) = %v, want within [%v, %v]", tc.retryAfter, tc.timeout, d, tc.lo, tc.hi)
				}
				seen[d] = true
			}
			if tc.lo < tc.hi && len(seen) < 2 {
				t.Errorf("concurrencyDelay(%v, %v) always %v: no jitter", tc.retryAfter, tc.timeout, seen)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		count    int
		min, max time.Duration
	}{
		{0, RetryBase / 2, RetryBase},
		{1, RetryBase / 2, RetryBase},
		{2, RetryBase, 2 * RetryBase},
		{4, 4 * RetryBase, 8 * RetryBase},
		{40, retryMax / 2, retryMax},
		{1 << 30, retryMax / 2, retryMax},
	} {
		for range 20 {
			if d := retryDelay(tc.count); d < tc.min || d > tc.max {
				t.Fatalf("retryDelay(%d) = %v, want within [%v, %v]", tc.count, d, tc.min, tc.max)
			}
		}
	}
}
