package agent

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// adminRedisCalls is how many admin requests may wait on Redis at once
// (GET /v1/tasks/{id}, the recent tasks of GET /v1/status, GET
// /v1/limits/check, the record read of POST /v1/tasks/{id}/report).
// redisConns counts them in the pool: an operator's script polling the
// admin API while Redis is slow holds at most these connections, never
// the ones the workers' claims and finishes need.
const adminRedisCalls = 2

// adminCalls holds the admin requests' turns at Redis.
type adminCalls chan struct{}

func newAdminCalls() adminCalls { return make(adminCalls, adminRedisCalls) }

// enter waits for a turn, at most wait or until ctx ends, and returns
// the function that gives it back; false when none came.
func (c adminCalls) enter(ctx context.Context, wait time.Duration) (func(), bool) {
	select {
	case c <- struct{}{}:
		return func() { <-c }, true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c <- struct{}{}:
		return func() { <-c }, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

// bound serves h in a turn, waiting for one at most wait; a request that
// gets none is answered 503 with Retry-After, and calls nothing. A request
// that took slow or longer may have given up on a Redis call whose
// connection still waits for the reply (rediswait): its turn is kept that
// much longer, the bound on that wait (redisIOTimeout), so that turns bound the
// connections and not only the requests.
func (c adminCalls) bound(wait, slow, hold time.Duration, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		leave, ok := c.enter(r.Context(), wait)
		if !ok {
			adminBusy(w, wait)
			return
		}
		start := time.Now()
		defer func() { c.leaveAfter(leave, time.Since(start), slow, hold) }()
		h(w, r)
	}
}

// leaveAfter gives a turn back: at once after a call that took less than
// slow, hold later otherwise.
func (adminCalls) leaveAfter(leave func(), took, slow, hold time.Duration) {
	if took < slow {
		leave()
		return
	}
	time.AfterFunc(hold, leave)
}

// adminBusy answers a request that found every admin turn at Redis taken.
func adminBusy(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(wait.Round(time.Second)/time.Second))))
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{
		"error":  "admin API busy: " + strconv.Itoa(adminRedisCalls) + " requests already wait on Redis (waited " + wait.String() + "); retry",
		"reason": "admin_busy",
	})
}
