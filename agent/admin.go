package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/lifecycle"
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
	RedisUp *bool `json:"redis_up,omitempty"`
	// RecentTasks are the ids of the newest task outcomes, newest first,
	// for GET /v1/tasks/{id}.
	RecentTasks []string     `json:"recent_tasks"`
	Drain       *DrainStatus `json:"drain,omitempty"`
	// Launch is the launch hook's gate: its readiness checks and
	// completion; absent without lifecycle.launch_hook_name.
	Launch *lifecycle.LaunchStatus `json:"launch,omitempty"`
}

// DrainStatus is the drain block of Status.
type DrainStatus struct {
	Source    string    `json:"source"`
	Reason    string    `json:"reason"`
	StartedAt time.Time `json:"started_at"`
	Deadline  time.Time `json:"deadline"`
	// RemainingTasks is how many tasks the drain still waits for (queued
	// and running).
	RemainingTasks int `json:"remaining_tasks"`
	// DeadlineInSeconds is the time left before the drain deadline, in
	// seconds (0 once it has passed).
	DeadlineInSeconds float64 `json:"deadline_in_seconds"`
	// Remaining is RemainingTasks under its old name, which reads as a
	// time; deprecated, kept for one release.
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
		Launch:     a.gate.Status(),
	}
	if st := a.gate.State(); st != "" && p.State == drain.Running {
		s.State = st
	}
	if a.cfg.HasRedis() {
		up := a.presence.up.Load()
		s.RedisUp = &up
	}
	if p.State == drain.Running {
		// Outside a drain the tracker still counts received work.
		s.Inflight, s.Queued = p.Running, p.Queued
	}
	counts := a.worker.Outcomes()
	for _, o := range outcome.All() {
		s.Outcomes[o] = counts[o]
	}
	if p.State != drain.Running {
		d := &DrainStatus{Source: p.Source, Reason: p.Reason, StartedAt: p.StartedAt, Deadline: p.Deadline,
			RemainingTasks: p.Remaining(), Remaining: p.Remaining(),
			Released: p.Released, Cancelled: p.Cancelled, TimedOut: p.TimedOut}
		if !p.Deadline.IsZero() {
			d.DeadlineInSeconds = max(0, p.Deadline.Sub(a.d.Clock.Now()).Seconds())
		}
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
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := a.drain.State(); st != drain.Running {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": st.String(), "state": st.String()})
			return
		}
		if st := a.gate.State(); st != "" {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": st, "state": st})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready", "state": "ready"})
	})
	// The requests that wait on Redis take turns (adminCalls), so that
	// they never hold the connections the workers need.
	calls := newAdminCalls(a.cfg.Redis.Timeout)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		s := a.Status()
		// The agent's own state is the answer; the recent tasks, from
		// Redis, are left out when no turn comes.
		calls.do(r.Context(), func(ctx context.Context) { s.RecentTasks = a.recentTasks(ctx, recentTaskIDs) })
		httpjson.Write(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST /v1/drain", func(w http.ResponseWriter, r *http.Request) {
		started := a.Drain("admin", "POST /v1/drain from "+r.RemoteAddr)
		httpjson.Write(w, http.StatusAccepted, map[string]any{"state": a.drain.State().String(), "started": started})
	})
	mux.HandleFunc("POST /v1/tasks", a.postTask)
	mux.HandleFunc("GET /v1/tasks/{id}", calls.bound(a.getTask))
	mux.HandleFunc("GET /v1/limits/check", calls.bound(limitsCheck(a.validator, a.d.Limiter)))
	mux.HandleFunc("POST /v1/tasks/{id}/report", taskReport(a.cfg, a.d.Store, a.hooks, a.log, calls))
	mux.HandleFunc("POST /v1/tasks/{id}/feedback", a.feedback.post(calls))
	mux.HandleFunc("GET /v1/reports/stats", a.feedback.stats(calls))
	mux.HandleFunc("POST /v1/approvals/{task_id}", calls.bound(a.approvals.DecideHandler()))
	mux.HandleFunc("GET /v1/approvals", calls.bound(a.approvals.WaitingHandler()))
	return mux
}

// adminRealm names the admin listener in its challenges.
const adminRealm = "autodiag admin"

// RequireAdminAuth guards an admin handler (the agent's Handler, the
// standalone alert listener's AdminHandler) with admin_auth's credentials (read by
// Config.AdminCredentials): every request without them is answered 401
// with a WWW-Authenticate challenge, except GET /healthz and GET /readyz,
// which probes call and which reveal nothing. With no credentials it
// returns h itself.
func RequireAdminAuth(creds alert.Credentials, h http.Handler) http.Handler {
	return RequireLiveAdminAuth(creds, nil, h)
}

// RequireLiveAdminAuth is RequireAdminAuth with live (when not nil)
// giving the credentials in force for each request, so a rotated
// admin_auth secret applies without a restart (AuthConfig.Live).
func RequireLiveAdminAuth(creds alert.Credentials, live func() alert.Credentials, h http.Handler) http.Handler {
	if !creds.Required() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
		creds := creds
		if live != nil {
			creds = live()
		}
		if !probe && !creds.Authorized(r) {
			alert.Unauthorized(w, creds, adminRealm)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// postTask submits a task through the one way in (Worker.SubmitBody).
// Invalid input is answered 400 with the reason and recorded as rejected,
// or as stale when it is older than queue.max_age (as a stale message
// from the queue is). A full embedded queue is answered 503.
func (a *Agent) postTask(w http.ResponseWriter, r *http.Request) {
	if a.drain.State() != drain.Running {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": "draining: not accepting tasks", "reason": "draining"})
		return
	}
	// A body past the cap is read up to one byte more: the decoder says
	// it is too large.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, task.MaxBodySize+1))
	if mb := (*http.MaxBytesError)(nil); err != nil && !errors.As(err, &mb) {
		httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	tctx, span := tracing.StartServer(r, "/v1/tasks")
	defer span.End()
	// A rejection's audit write is detached from the request by design:
	// it lands even when the client has gone.
	t, err := a.worker.SubmitBody(tctx, body) //nolint:contextcheck // tctx is r.Context() with the request's span
	switch reason := task.Reason(err); {
	case err == nil:
		httpjson.Write(w, http.StatusAccepted, map[string]string{"id": t.ID})
	case reason == worker.ReasonNotThisHost:
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "reason": reason, "host_names": a.hostNames})
	case reason != "":
		httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "reason": reason})
	default:
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "queue_unavailable"})
	}
}

// Bounds of the admin HTTP server. Any local process can connect, so a
// client that trickles its request, never reads the answer or opens
// thousands of connections must cost the agent a bounded number of
// descriptors and must not hold its exit.
const (
	// AdminReadHeaderTimeout bounds reading a request's headers.
	AdminReadHeaderTimeout = 5 * time.Second
	// AdminReadTimeout bounds reading a whole request, body included (a
	// task is at most 256 KiB, from a local client).
	AdminReadTimeout = 10 * time.Second
	// AdminWriteTimeout bounds writing an answer (/metrics is the largest).
	AdminWriteTimeout = 10 * time.Second
	// AdminIdleTimeout closes a kept-alive connection with no request.
	AdminIdleTimeout = 60 * time.Second
	// AdminMaxConns caps the connections served at once; further ones wait
	// in the kernel's accept backlog, holding no descriptor of the agent.
	AdminMaxConns = 64
	// AdminShutdownTimeout is how long the exit waits for requests in
	// progress to finish before it closes every connection.
	AdminShutdownTimeout = time.Second
)

// AdminServer serves the admin API on a listener with the bounds above.
type AdminServer struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// ServeAdmin starts serving h on ln until Shutdown. Errors other than the
// shutdown itself are logged.
func ServeAdmin(ln net.Listener, h http.Handler, log *slog.Logger) *AdminServer {
	s := &AdminServer{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: AdminReadHeaderTimeout, ReadTimeout: AdminReadTimeout,
			WriteTimeout: AdminWriteTimeout, IdleTimeout: AdminIdleTimeout, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(netutil.LimitListener(ln, AdminMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	return s
}

// Addr is the address the server listens on (the port chosen, for an
// admin_addr with port 0).
func (s *AdminServer) Addr() string { return s.addr.String() }

// Shutdown stops accepting, lets requests in progress finish for at most
// AdminShutdownTimeout, then closes every connection left (a slow client
// among them) and waits for the server's goroutine to end.
func (s *AdminServer) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), AdminShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
