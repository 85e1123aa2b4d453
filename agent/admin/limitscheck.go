package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/limiter"
)

// LimitsCheck is the answer of GET /v1/limits/check: the running agent's
// own limiter asked for one decision without consuming anything, and the
// live state of the rules that apply. `autodiag limits check` asks it in
// embedded mode, where the limiter lives in the agent's memory.
type LimitsCheck struct {
	Decision limiter.Decision    `json:"decision"`
	State    []limiter.RuleState `json:"state"`
}

// limitsCheckTimeout bounds the limiter calls of one check.
const limitsCheckTimeout = 10 * time.Second

// limitsCheck serves GET /v1/limits/check?host=H&diagnostic=D[&severity=S]
// with the agent's validator and limiter.
func limitsCheck(v *task.Validator, lim *limiter.Limiter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("diagnostic") == "" || q.Get("host") == "" {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": "host and diagnostic are required", "reason": "missing_parameter"})
			return
		}
		host, err := v.ValidateHost(q.Get("host"))
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "reason": "invalid_host"})
			return
		}
		if lim == nil {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": "this agent has no limiter", "reason": "no_limiter"})
			return
		}
		req := limiter.Request{Host: host, Diagnostic: q.Get("diagnostic"), Severity: q.Get("severity")}
		ctx, cancel := context.WithTimeout(r.Context(), limitsCheckTimeout)
		defer cancel()
		dec, err := lim.Check(ctx, req)
		if err != nil {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "limiter_unavailable"})
			return
		}
		rules, err := lim.Inspect(ctx, req)
		if err != nil {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "limiter_unavailable"})
			return
		}
		httpjson.Write(w, http.StatusOK, LimitsCheck{Decision: dec, State: rules})
	}
}
