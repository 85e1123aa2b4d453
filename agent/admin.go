package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
)

// Status is the body of GET /v1/status.
type Status struct {
	State      string           `json:"state"`
	InstanceID string           `json:"instance_id"`
	Version    string           `json:"version,omitempty"`
	Inflight   int              `json:"inflight"`
	Queued     int              `json:"queued"`
	Outcomes   map[string]int64 `json:"outcomes"`
	// RedisUp is whether Redis answered the last check; absent without
	// Redis (embedded mode).
	RedisUp *bool        `json:"redis_up,omitempty"`
	Drain   *DrainStatus `json:"drain,omitempty"`
}

// DrainStatus is the drain block of Status.
type DrainStatus struct {
	Source    string          `json:"source"`
	Reason    string          `json:"reason"`
	StartedAt time.Time       `json:"started_at"`
	Deadline  time.Time       `json:"deadline"`
	Remaining int             `json:"remaining"`
	Released  int             `json:"released"`
	Cancelled int             `json:"cancelled"`
	TimedOut  bool            `json:"timed_out"`
	Lifecycle LifecycleStatus `json:"lifecycle"`
}

// LifecycleStatus reports the lifecycle action of a drain.
type LifecycleStatus struct {
	Hook       string `json:"hook"`
	Heartbeats int    `json:"heartbeats"`
	Completed  bool   `json:"completed"`
	Result     string `json:"result,omitempty"`
}

// Status returns the agent's current status.
func (a *Agent) Status() Status {
	p := a.drain.Progress()
	s := Status{
		State:      p.State.String(),
		InstanceID: a.d.InstanceID,
		Version:    a.d.Version,
		Inflight:   p.Running,
		Queued:     p.Queued,
		Outcomes:   map[string]int64{},
	}
	if a.cfg.hasRedis() {
		up := a.presence.up.Load()
		s.RedisUp = &up
	}
	if p.State == drain.Running {
		// Outside a drain the tracker still counts received work.
		s.Inflight, s.Queued = p.Running, p.Queued
	}
	counts := a.outcomes.snapshot()
	for _, o := range Outcomes() {
		s.Outcomes[o] = counts[o]
	}
	if p.State != drain.Running {
		d := &DrainStatus{Source: p.Source, Reason: p.Reason, StartedAt: p.StartedAt, Deadline: p.Deadline,
			Remaining: p.Remaining(), Released: p.Released, Cancelled: p.Cancelled, TimedOut: p.TimedOut}
		if a.d.Actor != nil {
			st := a.d.Actor.Status()
			d.Lifecycle = LifecycleStatus{Hook: st.Hook, Heartbeats: st.Heartbeats, Completed: st.Completed, Result: st.Result}
		}
		s.Drain = d
	}
	return s
}

// Handler serves the admin API (README "Admin HTTP").
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.d.Registry, promhttp.HandlerOpts{Registry: a.d.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := a.drain.State(); st != drain.Running {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": st.String()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.Status())
	})
	mux.HandleFunc("POST /v1/drain", func(w http.ResponseWriter, r *http.Request) {
		started := a.Drain("admin", "POST /v1/drain from "+r.RemoteAddr)
		writeJSON(w, http.StatusAccepted, map[string]any{"state": a.drain.State().String(), "started": started})
	})
	mux.HandleFunc("POST /v1/tasks", a.postTask)
	return mux
}

// postTask validates a task and puts it on the queue. Invalid input is
// answered 400 with the reason and recorded as rejected.
func (a *Agent) postTask(w http.ResponseWriter, r *http.Request) {
	if a.drain.State() != drain.Running {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "draining: not accepting tasks"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, task.MaxBodySize+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			a.rejectPosted(w, task.Task{}, &task.Error{Reason: task.ReasonTooLarge, Detail: "body exceeds 256 KiB"})
			return
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	t, err := task.Decode(body)
	if err == nil {
		err = a.validator.Validate(&t, a.d.Clock.Now())
	}
	if err != nil {
		a.rejectPosted(w, t, err)
		return
	}
	if t.ID == "" {
		t.ID = "api-" + randomID()
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = a.d.Clock.Now().UTC()
	}
	body, _ = json.Marshal(t)
	if _, err := a.d.Source.Send(r.Context(), body); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "queue: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"id": t.ID})
}

func (a *Agent) rejectPosted(w http.ResponseWriter, t task.Task, err error) {
	a.outcomes.received()
	j := &job{task: t, received: a.d.Clock.Now()}
	a.outcomes.end(j, ended{outcome: OutcomeRejected, reason: task.Reason(err), detail: err.Error()})
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "reason": task.Reason(err)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
