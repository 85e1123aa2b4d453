package notify

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// newFakeClock is a manual clock shared by an outbox and a dispatcher.
func newFakeClock() *clock.Manual {
	return clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
}

// request is what a receiver saw.
type request struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server answering with the statuses of answers in
// turn (the last one from then on), recording every request.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	answers []int
	reqs    []request
	hang    chan struct{} // when set, requests wait for it to close (or their client to go)
	header  http.Header   // added to every answer
	// open counts the requests being answered now; mostOpen is the most
	// there were at once.
	open, mostOpen int
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers, header: http.Header{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.reqs = append(r.reqs, request{header: req.Header.Clone(), body: body})
	code := http.StatusOK
	if len(r.answers) > 0 {
		code = r.answers[0]
		if len(r.answers) > 1 {
			r.answers = r.answers[1:]
		}
	}
	hang := r.hang
	for k, v := range r.header {
		w.Header()[k] = v
	}
	r.open++
	r.mostOpen = max(r.mostOpen, r.open)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.open--
		r.mu.Unlock()
	}()
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
		}
	}
	w.WriteHeader(code)
}

// mostAtOnce is the most requests the receiver was answering at once.
func (r *receiver) mostAtOnce() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mostOpen
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.reqs...)
}

// waitFor polls cond until it holds or within passes, failing the test then.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// rescheduled reports whether ob holds an entry waiting for its retry after
// its claims-th try. A test moves its clock only then: moved while the try
// still runs, past the claim idle time, the entry is claimed again under it.
func rescheduled(ob *MemoryOutbox, claims int) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return slices.ContainsFunc(ob.entries, func(e *memEntry) bool { return e.claims == claims && !e.retryAt.IsZero() })
}

// runDispatcher runs d until the test ends.
func runDispatcher(t *testing.T, d *Dispatcher) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// answerNow makes the receiver answer from now on instead of hanging.
func (r *receiver) answerNow() {
	r.mu.Lock()
	r.hang = nil
	r.mu.Unlock()
}

func testutilCounter(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }

// delKeys removes the outbox's keys (every sink's), for a test's cleanup.
func (r *RedisOutbox) delKeys(rc redis.UniversalClient) {
	ctx := context.Background()
	for _, s := range []string{"a", "b", "hook", "slow", "fast", "slack"} {
		r.queue(s)
	}
	r.mu.Lock()
	keys := []string{r.dead}
	for s, q := range r.queues {
		keys = append(keys, q.Stream(), r.prefix+"retry:"+s)
	}
	r.mu.Unlock()
	for _, k := range keys { // one by one: a cluster refuses a DEL across slots it cannot see as one
		rc.Del(ctx, k)
	}
}
