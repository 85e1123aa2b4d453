package admin

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
)

// taskReport serves POST /v1/tasks/{id}/report[?force=true]: this
// agent writes the task's report now through its own report limits (the
// cooldown and daily cap it applies to every report), stores it in the
// record, sends the `report` event, and answers the result. `autodiag
// report ID` asks it in embedded mode, where the record, the outbox and
// the report limiter live in the agent's memory.
func taskReport(cfg config.Config, store state.TaskStore, h *hooks.Hooks, log *slog.Logger, calls *redisCalls) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.ReportsOn() {
			httpjson.Write(w, http.StatusConflict, map[string]string{"error": "report.enabled is false on this agent", "reason": "report_disabled"})
			return
		}
		id := r.PathValue("id")
		// A turn at Redis for the record's read; the model call below
		// takes none.
		var rec state.TaskRecord
		var ok bool
		var err error
		if !calls.do(r.Context(), func(ctx context.Context) {
			sctx, cancel := context.WithTimeout(ctx, cfg.Redis.Timeout)
			defer cancel()
			rec, ok, err = store.Task(sctx, id)
		}) {
			calls.busy(w)
			return
		}
		switch {
		case err != nil:
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "state_unavailable"})
			return
		case !ok:
			httpjson.Write(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
			return
		case rec.Status != state.StatusDone || rec.Outcome == "":
			httpjson.Write(w, http.StatusConflict, map[string]string{"error": "task " + id + " has not ended (status " + rec.Status + ")", "reason": "not_ended"})
			return
		}
		var diag *runner.Diagnostic
		for i := range cfg.Diagnostics {
			if cfg.Diagnostics[i].Name == rec.Diagnostic {
				diag = &cfg.Diagnostics[i]
			}
		}
		// The model call outlives the admin listener's write timeout.
		bound := cfg.Report.Timeout + 2*cfg.Redis.Timeout
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bound + WriteTimeout))
		ctx, cancel := context.WithTimeout(r.Context(), bound)
		defer cancel()
		res, err := h.ReportNow(ctx, rec, diag, r.URL.Query().Get("force") == "true", cfg.Redis.Timeout)
		if err != nil {
			log.Warn("report written but not stored", "task_id", id, "err", err)
		}
		httpjson.Write(w, http.StatusOK, res)
	}
}
