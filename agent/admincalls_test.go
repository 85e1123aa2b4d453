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

	"github.com/autodiag/autodiag/agent/admin"
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

// TestAdminRequestsTakeTurnsAtRedis: while admin.RedisCalls admin reads
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
	codes := make([]int, admin.RedisCalls)
	for i := range admin.RedisCalls {
		wg.Go(func() {
			if resp, _ := get("/v1/tasks/held"); resp != nil {
				codes[i] = resp.StatusCode
			}
		})
	}
	waitFor(t, "the held reads at the store", func() bool { return store.reached.Load() == admin.RedisCalls })
	resp, out := get("/v1/tasks/other")
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || out["reason"] != "admin_busy" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET with every turn taken = %v %v; want 503 admin_busy with Retry-After", resp, out)
	}
	if n := store.reached.Load(); n != admin.RedisCalls {
		t.Fatalf("%d reads reached the store, want %d: the busy request must not call it", n, admin.RedisCalls)
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
