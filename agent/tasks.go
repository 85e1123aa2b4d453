package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/tracing"
)

// getTask serves GET /v1/tasks/{id}: the record from the state store
// (memory or Redis), 404 when there is none.
func (a *Agent) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), max(a.cfg.Redis.Timeout, time.Second))
	defer cancel()
	rec, ok, err := a.d.Store.Task(ctx, id)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "state store: " + err.Error(), "reason": "state_unavailable"})
	case !ok:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
	default:
		writeJSON(w, http.StatusOK, rec.View(tracing.Link))
	}
}

// recentTasks lists the ids of the newest task outcomes (the audit
// stream), newest first, for `autodiag status` without Redis.
func (a *Agent) recentTasks(ctx context.Context, n int) []string {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Redis.Timeout)
	defer cancel()
	entries, err := a.d.Store.RecentAudit(ctx, n)
	if err != nil {
		return nil
	}
	ids := []string{}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.TaskID != "" && !seen[e.TaskID] {
			seen[e.TaskID] = true
			ids = append(ids, e.TaskID)
		}
	}
	return ids
}

// recentTaskIDs is how many recent task ids GET /v1/status lists.
const recentTaskIDs = 20
