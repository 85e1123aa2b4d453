package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/outcome"
)

// getTask serves GET /v1/tasks/{id}: the record from the state store
// (memory or Redis), 404 when there is none.
func (a *API) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), max(a.o.Config.Redis.Timeout, time.Second))
	defer cancel()
	rec, ok, err := a.o.Store.Task(ctx, id)
	switch {
	case err != nil:
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": "state store: " + err.Error(), "reason": "state_unavailable"})
	case !ok:
		// A task parked for approval has no record until it runs or is
		// denied: the approval store shows it.
		if v, parked, perr := a.o.Approvals.Lookup(ctx, id); perr == nil && parked {
			httpjson.Write(w, http.StatusOK, v)
			return
		}
		httpjson.Write(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
	default:
		httpjson.Write(w, http.StatusOK, rec.View(tracing.Link))
	}
}

// recentTasks lists the ids of the newest task outcomes that have a
// record (the audit stream), newest first, at most n, for `autodiag show`
// without Redis. A task that ended rejected or stale never had a record:
// its id is the sender's, perhaps not an id at all, and GET /v1/tasks/{id}
// answers 404 for it, so it is left out (the log, the metric and the
// audit stream keep it).
func (a *API) recentTasks(ctx context.Context, n int) []string {
	ctx, cancel := context.WithTimeout(ctx, a.o.Config.Redis.Timeout)
	defer cancel()
	// Read past the rejected ones, within a bound.
	entries, err := a.o.Store.RecentAudit(ctx, recentAuditRead*n)
	if err != nil {
		return nil
	}
	ids := []string{}
	seen := map[string]bool{}
	for _, e := range entries {
		if len(ids) == n {
			break
		}
		if e.TaskID == "" || seen[e.TaskID] || !hasRecord(e.Outcome) || task.QuoteID(e.TaskID) != e.TaskID {
			continue
		}
		seen[e.TaskID] = true
		ids = append(ids, e.TaskID)
	}
	return ids
}

// recentAuditRead is how many audit entries recentTasks reads per id it
// lists, so a burst of rejected tasks does not empty the list.
const recentAuditRead = 5

// hasRecord reports whether a task that ended with this outcome has a
// record GET /v1/tasks/{id} answers: all but rejected and stale, which end
// before one is written.
func hasRecord(o string) bool { return o != outcome.Rejected && o != outcome.Stale }

// recentTaskIDs is how many recent task ids GET /v1/status lists.
const recentTaskIDs = 20
