package admin

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/autodiag/autodiag/agent/internal/httpjson"
)

// RedisCalls is how many admin requests may wait on Redis at once
// (GET /v1/tasks/{id}, the recent tasks of GET /v1/status, GET
// /v1/limits/check, the record read of POST /v1/tasks/{id}/report).
// The agent counts them in its Redis pool: an operator's script polling the
// admin API while Redis is slow holds at most these connections, never
// the ones the workers' claims and finishes need.
const RedisCalls = 2

// redisCalls holds the admin requests' turns at Redis. wait bounds the
// wait for a turn; a call that took slow or longer may have given up on a
// Redis call whose connection still waits for the reply (rediswait), so
// its turn is kept hold longer, the bound on that wait (a Redis read's):
// turns bound the connections, not only the requests.
type redisCalls struct {
	turns            chan struct{}
	wait, slow, hold time.Duration
}

// newCalls derives the waits from redis.timeout and the bound of a
// Redis read or write (ioTimeout).
func newCalls(redisTimeout, ioTimeout time.Duration) *redisCalls {
	return &redisCalls{turns: make(chan struct{}, RedisCalls),
		wait: max(redisTimeout, time.Second), slow: redisTimeout, hold: ioTimeout}
}

// do runs f with ctx in a turn, waiting for one at most c.wait or until
// ctx ends; false, and f not run, when none came.
func (c *redisCalls) do(ctx context.Context, f func(context.Context)) bool {
	if !c.enter(ctx) {
		return false
	}
	start := time.Now()
	defer func() {
		if time.Since(start) < c.slow {
			<-c.turns
			return
		}
		time.AfterFunc(c.hold, func() { <-c.turns })
	}()
	f(ctx)
	return true
}

func (c *redisCalls) enter(ctx context.Context) bool {
	select {
	case c.turns <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case c.turns <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// bound serves h in a turn; a request that gets none is answered 503 with
// Retry-After, and calls nothing.
func (c *redisCalls) bound(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.do(r.Context(), func(ctx context.Context) { h(w, r.WithContext(ctx)) }) {
			c.busy(w)
		}
	}
}

// busy answers a request that found every admin turn at Redis taken.
func (c *redisCalls) busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(c.wait.Round(time.Second)/time.Second))))
	httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{
		"error":  "admin API busy: " + strconv.Itoa(RedisCalls) + " requests already wait on Redis (waited " + c.wait.String() + "); retry",
		"reason": "admin_busy",
	})
}
