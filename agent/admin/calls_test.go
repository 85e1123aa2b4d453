package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdminTurnKeptAfterASlowCall: a request that took the Redis timeout
// or longer may have left its call waiting on Redis (the caller gives up,
// the connection waits for the reply): its turn comes back only the I/O
// bound later; a quick one's at once.
func TestAdminTurnKeptAfterASlowCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const slow, hold, wait = 200 * time.Millisecond, 2 * time.Second, time.Second
		calls := newCalls(slow, hold) // redis.timeout, and the I/O bound hold; wait 1 s
		if calls.slow != slow || calls.hold != hold || calls.wait != wait {
			t.Fatalf("waits from redis.timeout %v: slow %v, hold %v, wait %v; want %v, %v, %v", slow, calls.slow, calls.hold, calls.wait, slow, hold, wait)
		}
		h := func(d time.Duration) http.HandlerFunc {
			return calls.bound(func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(d) // the request's Redis call, in fake time
				w.WriteHeader(http.StatusNoContent)
			})
		}
		serve := func(d time.Duration) int {
			rec := httptest.NewRecorder()
			h(d)(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/tasks/x", nil))
			return rec.Code
		}
		for range RedisCalls {
			if code := serve(slow - time.Millisecond); code != http.StatusNoContent {
				t.Fatalf("quick request = %d", code)
			}
		}
		if n := len(calls.turns); n != 0 {
			t.Fatalf("%d turns taken after quick requests, want 0", n)
		}
		start := time.Now()
		for range RedisCalls {
			serve(slow)
		}
		if code := serve(0); code != http.StatusServiceUnavailable {
			t.Fatalf("request while the slow ones' turns are kept = %d, want 503", code)
		}
		// The slow requests ended at start+slow and start+2×slow; the
		// third waited wait for a turn: none came before start+slow+hold.
		if got := time.Since(start); got != 2*slow+wait {
			t.Fatalf("busy answer after %v, want %v", got, 2*slow+wait)
		}
		time.Sleep(slow + hold - 2*slow - wait) // until the first slow turn comes back
		if code := serve(0); code != http.StatusNoContent || time.Since(start) != slow+hold {
			t.Fatalf("request once a kept turn came back = %d at %v, want 204 at %v", code, time.Since(start), slow+hold)
		}
	})
}
