package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/launch"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// Worker is what the admin API asks of the task worker: the outcome
// counts, and the one way a task enters the queue (worker.Submitter).
type Worker interface {
	Outcomes() map[string]int64
	SubmitBody(ctx context.Context, body []byte) (task.Task, error)
}

// Options are the agent's parts the admin API reads and asks.
type Options struct {
	Config   config.Config
	Registry *prometheus.Registry
	Drain    *drain.Controller
	// StartDrain starts a drain (POST /v1/drain); the first trigger wins.
	StartDrain func(source, reason string) bool
	Gate       *launch.Gate
	// Actor is the lifecycle action's status in a drain; nil = none.
	Actor  *lifecycle.Actor
	Worker Worker
	// RedisUp is whether Redis answered the instance record's last
	// write (with Redis only).
	RedisUp   func() bool
	Store     state.Store
	Approvals *approval.Approvals
	Validator *task.Validator
	Limiter   *limiter.Limiter
	Hooks     *hooks.Hooks
	Feedback  *Feedback
	// HostNames are the names the agent answers for, said with a
	// not_this_host refusal.
	HostNames  []string
	InstanceID string
	Version    string
	Clock      clock.Clock
	Logger     *slog.Logger
	// RedisIOTimeout bounds a Redis read or write: how long a turn is
	// kept after a call that gave up on Redis (Calls).
	RedisIOTimeout time.Duration
}

// API is the admin API of one agent (README "Admin HTTP").
type API struct{ o Options }

// New builds the admin API over the agent's parts.
func New(o Options) *API { return &API{o: o} }

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
func (a *API) Status() Status {
	p := a.o.Drain.Progress()
	s := Status{
		State:      p.State.String(),
		InstanceID: a.o.InstanceID,
		Version:    a.o.Version,
		Inflight:   p.Running,
		Queued:     p.Queued,
		Outcomes:   map[string]int64{},
		Launch:     a.o.Gate.Status(),
	}
	if st := a.o.Gate.State(); st != "" && p.State == drain.Running {
		s.State = st
	}
	if a.o.Config.HasRedis() {
		up := a.o.RedisUp()
		s.RedisUp = &up
	}
	if p.State == drain.Running {
		// Outside a drain the tracker still counts received work.
		s.Inflight, s.Queued = p.Running, p.Queued
	}
	counts := a.o.Worker.Outcomes()
	for _, o := range outcome.All() {
		s.Outcomes[o] = counts[o]
	}
	if p.State != drain.Running {
		d := &DrainStatus{Source: p.Source, Reason: p.Reason, StartedAt: p.StartedAt, Deadline: p.Deadline,
			RemainingTasks: p.Remaining(), Remaining: p.Remaining(),
			Released: p.Released, Cancelled: p.Cancelled, TimedOut: p.TimedOut}
		if !p.Deadline.IsZero() {
			d.DeadlineInSeconds = max(0, p.Deadline.Sub(a.o.Clock.Now()).Seconds())
		}
		if a.o.Actor != nil {
			st := a.o.Actor.Status()
			d.Lifecycle = LifecycleStatus{Hook: st.Hook, Heartbeats: st.Heartbeats, Completed: st.Completed, Result: st.Result}
		}
		s.Drain = d
	}
	return s
}

// Handler serves the admin API (README "Admin HTTP").
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.o.Registry, promhttp.HandlerOpts{Registry: a.o.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := a.o.Drain.State(); st != drain.Running {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": st.String(), "state": st.String()})
			return
		}
		if st := a.o.Gate.State(); st != "" {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": st, "state": st})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready", "state": "ready"})
	})
	// The requests that wait on Redis take turns (redisCalls), so that
	// they never hold the connections the workers need.
	calls := newCalls(a.o.Config.Redis.Timeout, a.o.RedisIOTimeout)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		s := a.Status()
		// The agent's own state is the answer; the recent tasks, from
		// Redis, are left out when no turn comes.
		calls.do(r.Context(), func(ctx context.Context) { s.RecentTasks = a.recentTasks(ctx, recentTaskIDs) })
		httpjson.Write(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST /v1/drain", func(w http.ResponseWriter, r *http.Request) {
		started := a.o.StartDrain("admin", "POST /v1/drain from "+r.RemoteAddr)
		httpjson.Write(w, http.StatusAccepted, map[string]any{"state": a.o.Drain.State().String(), "started": started})
	})
	mux.HandleFunc("POST /v1/tasks", a.postTask)
	mux.HandleFunc("GET /v1/tasks/{id}", calls.bound(a.getTask))
	mux.HandleFunc("GET /v1/limits/check", calls.bound(limitsCheck(a.o.Validator, a.o.Limiter)))
	mux.HandleFunc("POST /v1/tasks/{id}/report", taskReport(a.o.Config, a.o.Store, a.o.Hooks, a.o.Logger, calls))
	mux.HandleFunc("POST /v1/tasks/{id}/feedback", a.o.Feedback.post(calls))
	mux.HandleFunc("GET /v1/reports/stats", a.o.Feedback.stats(calls))
	mux.HandleFunc("POST /v1/approvals/{task_id}", calls.bound(a.o.Approvals.DecideHandler()))
	mux.HandleFunc("GET /v1/approvals", calls.bound(a.o.Approvals.WaitingHandler()))
	return mux
}

// realm names the admin listener in its challenges.
const realm = "autodiag admin"

// RequireAuth guards an admin handler (the agent's Handler, the
// standalone alert listener's AdminHandler) with admin_auth's credentials (read by
// Config.AdminCredentials): every request without them is answered 401
// with a WWW-Authenticate challenge, except GET /healthz and GET /readyz,
// which probes call and which reveal nothing. With no credentials it
// returns h itself.
func RequireAuth(creds alert.Credentials, h http.Handler) http.Handler {
	return RequireLiveAuth(creds, nil, h)
}

// RequireLiveAuth is RequireAuth with live (when not nil)
// giving the credentials in force for each request, so a rotated
// admin_auth secret applies without a restart (AuthConfig.Live).
func RequireLiveAuth(creds alert.Credentials, live func() alert.Credentials, h http.Handler) http.Handler {
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
			alert.Unauthorized(w, creds, realm)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// postTask submits a task through the one way in (Worker.SubmitBody).
// Invalid input is answered 400 with the reason and recorded as rejected,
// or as stale when it is older than queue.max_age (as a stale message
// from the queue is). A full embedded queue is answered 503.
func (a *API) postTask(w http.ResponseWriter, r *http.Request) {
	if a.o.Drain.State() != drain.Running {
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
	t, err := a.o.Worker.SubmitBody(tctx, body) //nolint:contextcheck // tctx is r.Context() with the request's span
	switch reason := task.Reason(err); {
	case err == nil:
		httpjson.Write(w, http.StatusAccepted, map[string]string{"id": t.ID})
	case reason == worker.ReasonNotThisHost:
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "reason": reason, "host_names": a.o.HostNames})
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
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included (a
	// task is at most 256 KiB, from a local client).
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds writing an answer (/metrics is the largest).
	WriteTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout = 60 * time.Second
	// MaxConns caps the connections served at once; further ones wait
	// in the kernel's accept backlog, holding no descriptor of the agent.
	MaxConns = 64
	// ShutdownTimeout is how long the exit waits for requests in
	// progress to finish before it closes every connection.
	ShutdownTimeout = time.Second
)

// Server serves the admin API on a listener with the bounds above.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// Serve starts serving h on ln until Shutdown. Errors other than the
// shutdown itself are logged.
func Serve(ln net.Listener, h http.Handler, log *slog.Logger) *Server {
	s := &Server{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
			WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(netutil.LimitListener(ln, MaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	return s
}

// Addr is the address the server listens on (the port chosen, for an
// admin_addr with port 0).
func (s *Server) Addr() string { return s.addr.String() }

// Shutdown stops accepting, lets requests in progress finish for at most
// ShutdownTimeout, then closes every connection left (a slow client
// among them) and waits for the server's goroutine to end.
func (s *Server) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
