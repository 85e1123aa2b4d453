package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/agent/state"
)

// heldReads holds every task read until gate closes (or its call times
// out), counting the reads that reached it.
type heldReads struct {
	state.Store
	gate    chan struct{}
	reached atomic.Int64
}

func (s *heldReads) Task(ctx context.Context, id string) (state.TaskRecord, bool, error) {
	s.reached.Add(1)
	<-s.gate // a call that outlives its caller's deadline
	return s.Store.Task(ctx, id)
}

// TestAdminRequestsTakeTurnsAtRedis: while adminRedisCalls admin reads
// wait on a slow store, the next is answered 503 admin_busy with
// Retry-After and never reaches the store, so that admin polling cannot
// hold the connections the workers need; GET /v1/status still answers,
// without the recent tasks.
func TestAdminRequestsTakeTurnsAtRedis(t *testing.T) {
	t.Parallel()
	store := &heldReads{Store: state.NewMemory(state.MemoryOptions{}), gate: make(chan struct{})}
	a, _, _ := endLabWith(t, receiveWindowConfig, store, nil, nil, nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	get := func(path string) (*http.Response, map[string]any) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return resp, out
	}
	var wg sync.WaitGroup
	codes := make([]int, adminRedisCalls)
	for i := range adminRedisCalls {
		wg.Go(func() {
			if resp, _ := get("/v1/tasks/held"); resp != nil {
				codes[i] = resp.StatusCode
			}
		})
	}
	waitFor(t, "the held reads at the store", func() bool { return store.reached.Load() == adminRedisCalls })
	resp, out := get("/v1/tasks/other")
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || out["reason"] != "admin_busy" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET with every turn taken = %v %v; want 503 admin_busy with Retry-After", resp, out)
	}
	if n := store.reached.Load(); n != adminRedisCalls {
		t.Fatalf("%d reads reached the store, want %d: the busy request must not call it", n, adminRedisCalls)
	}
	if resp, out := get("/v1/status"); resp == nil || resp.StatusCode != http.StatusOK || out["recent_tasks"] != nil {
		t.Fatalf("GET /v1/status with every turn taken = %v, recent_tasks %v; want 200 without them", resp, out["recent_tasks"])
	}
	close(store.gate)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusNotFound {
			t.Errorf("held read %d = %d, want 404 once the store answers", i, c)
		}
	}
}

// TestAdminTurnKeptAfterASlowCall: a request that took the Redis timeout
// or longer may have left its call waiting on Redis (the caller gives up,
// the connection waits for the reply): its turn comes back only the I/O
// bound later; a quick one's at once.
func TestAdminTurnKeptAfterASlowCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const slow, hold, wait = 200 * time.Millisecond, 2 * time.Second, time.Second
		calls := newAdminCalls(slow) // redis.timeout: hold is its I/O bound, wait 1 s
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
		for range adminRedisCalls {
			if code := serve(slow - time.Millisecond); code != http.StatusNoContent {
				t.Fatalf("quick request = %d", code)
			}
		}
		if n := len(calls.turns); n != 0 {
			t.Fatalf("%d turns taken after quick requests, want 0", n)
		}
		start := time.Now()
		for range adminRedisCalls {
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
