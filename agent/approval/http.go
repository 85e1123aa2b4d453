package approval

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// maxBody bounds a decision's request body.
const maxBody = 8 << 10

// DecideHandler serves POST /v1/approvals/{task_id} on the admin API:
// {"decision": "approve"|"deny", "by", "reason", "via"} (via defaults to
// api; the CLI says cli): 200 with the decision; 400 malformed or
// invalid; 404 not_found (nothing awaits approval under that id); 409
// already_decided; 503 store_unavailable.
func (a *Approvals) DecideHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("task_id")
		var in struct {
			Decision string `json:"decision"`
			By       string `json:"by"`
			Reason   string `json:"reason"`
			Via      string `json:"via"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want JSON {"decision": "approve"|"deny", "by", "reason"}`, "reason": "malformed_json"})
			return
		}
		d := Decision{By: in.By, Reason: in.Reason, Via: in.Via}
		switch in.Decision {
		case "approve":
			d.Approve = true
		case "deny":
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": `decision must be "approve" or "deny"`, "reason": "invalid_decision"})
			return
		}
		if d.Via == "" {
			d.Via = ViaAPI
		}
		if d.Via == ViaSlack {
			// Slack's decisions come through the signed interactivity
			// endpoint only.
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "via must be api or cli here", "reason": "invalid_decision"})
			return
		}
		err = a.Decide(r.Context(), id, d)
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, map[string]string{"task_id": id, "decision": in.Decision, "by": d.By, "via": d.Via})
		case errors.Is(err, ErrInvalid):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "reason": "invalid_decision"})
		case errors.Is(err, ErrUnknown):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "task " + id + " does not await approval", "reason": "not_found"})
		case errors.Is(err, ErrDecided):
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error(), "reason": "already_decided"})
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "store_unavailable"})
		}
	}
}

// WaitingHandler serves GET /v1/approvals: the tasks parked for approval
// and not yet sent on, earliest due first, at most MaxList.
func (a *Approvals) WaitingHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tasks, err := a.Waiting(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "store_unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"approvals": tasks})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
