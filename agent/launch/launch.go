package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/lifecycle"
)

// Launch phases of the agent, as /readyz and /v1/status tell them.
const (
	// launchStarting: the launch sequence runs (readiness checks, launch
	// hook, first lifecycle state read); no work is taken yet.
	launchStarting int32 = iota
	// launchOpen: intake runs.
	launchOpen
	// launchAbandoned: the launch hook was completed with ABANDON; the
	// instance is being replaced and the agent takes no work.
	launchAbandoned
)

// State names of the agent besides the drain's own.
const (
	StateWarmed    = "warmed"
	StateStarting  = "starting"
	StateAbandoned = "abandoned"
)

// launchRetry is the pause before the launch sequence runs again after a
// completion of the launch hook failed past its retries.
const launchRetry = lifecycle.LaunchRecheck

// Gate holds intake until the launch sequence is through: the readiness
// checks pass and the launch hook is completed, and while the instance
// sits in a warm pool. It also tells the launch phase to /readyz,
// /v1/status and the instance record.
type Gate struct {
	cfg     config.Config
	watcher *lifecycle.Watcher // nil without imds or sqs sources
	actor   *lifecycle.Actor   // nil without a launch hook or those sources
	store   interface {
		Ping(ctx context.Context) error
	}
	queue    Reachable // nil: no queue check
	log      *slog.Logger
	nudge    chan<- struct{} // the instance record is written again
	phase    atomic.Int32    // launchStarting, launchOpen or launchAbandoned
	watching atomic.Bool     // the lifecycle watcher runs
}

// Options are what a Gate is built from.
type Options struct {
	Config  config.Config
	Watcher *lifecycle.Watcher
	Actor   *lifecycle.Actor
	Store   interface {
		Ping(ctx context.Context) error
	}
	// Queue answers the readiness check of the task queue; nil = no
	// such check (the memory queue always answers).
	Queue  Reachable
	Logger *slog.Logger
	// Nudge is sent to (without blocking) when the phase changes.
	Nudge chan<- struct{}
}

// New builds the gate; Open or Await opens it.
func New(o Options) *Gate {
	return &Gate{cfg: o.Config, watcher: o.Watcher, actor: o.Actor, store: o.Store, queue: o.Queue, log: o.Logger, nudge: o.Nudge}
}

// Open lets intake start at once (no launch sequence: see Gated).
func (g *Gate) Open() { g.phase.Store(launchOpen) }

// Watching records that the lifecycle watcher runs (a readiness check).
func (g *Gate) Watching() { g.watching.Store(true) }

// Reachable is a task queue that can say whether it answers
// (queue.SQS: GetQueueAttributes).
type Reachable interface {
	Reachable(ctx context.Context) error
}

// Await runs the launch sequence (lifecycle.GateIntake) before
// intake: it reports true once intake may start, false when it must not
// (the launch was abandoned, or ctx ended: a drain or a fast exit). A
// completion of the launch hook that failed past its retries is tried
// again after launchRetry: the instance is not given work while Auto
// Scaling may still abandon it, nor left idle if the hook's default
// result lets it in.
func (g *Gate) Await(ctx context.Context) bool {
	if g.phase.Load() == launchOpen {
		return true
	}
	for {
		// Each attempt of the launch sequence (readiness, the launch
		// hook's heartbeats and completion) is a trace of its own.
		lctx, span := tracing.StartWith(ctx, "launch", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal))
		err := lifecycle.GateIntake(lctx, g.watcher, g.actor, g.readiness)
		tracing.Fail(span, err)
		span.End()
		switch {
		case err == nil:
			g.phase.Store(launchOpen)
			g.nudgePresence()
			g.log.Info("intake starts")
			return true
		case errors.Is(err, lifecycle.ErrLaunchAbandoned):
			g.phase.Store(launchAbandoned)
			g.nudgePresence()
			g.log.Error("launch abandoned: no work is taken; waiting for the instance's termination to drain")
			return false
		case ctx.Err() != nil:
			return false
		}
		g.log.Error("launch sequence failed; retrying", "err", err, "retry_in", launchRetry.Seconds())
		t := time.NewTimer(launchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// nudgePresence has the instance record written again now that the
// launch state changed.
func (g *Gate) nudgePresence() {
	select {
	case g.nudge <- struct{}{}:
	default:
	}
}

// Gated reports whether intake waits for a launch sequence: a
// launch hook to complete, or the imds source's first read of the target
// lifecycle state (a warm pool). Without either, intake opens with Run.
func (g *Gate) Gated() bool {
	return g.cfg.Lifecycle.LaunchHookName != "" || (g.watcher != nil && g.cfg.Lifecycle.Has(lifecycle.SourceIMDS))
}

// readiness runs the agent's launch readiness checks once: the config is
// valid, every catalog program is present and executable, the state store
// answers (Redis PING, fleet mode), the task queue answers
// (GetQueueAttributes), and the lifecycle sources have started.
func (g *Gate) readiness(ctx context.Context) []lifecycle.Check {
	checks := []lifecycle.Check{check("config", g.cfg.Validate())}
	for _, d := range g.cfg.Diagnostics {
		checks = append(checks, check("program "+d.Name, programPresent(d.Command)))
	}
	if g.cfg.HasRedis() {
		checks = append(checks, check("redis", g.store.Ping(ctx)))
	}
	if g.queue != nil {
		checks = append(checks, check("queue", g.queue.Reachable(ctx)))
	}
	if g.watcher != nil {
		checks = append(checks, check("lifecycle", g.sourcesStarted()))
	}
	return checks
}

// sourcesStarted says whether the lifecycle watcher runs and, with the
// imds source, has read the target lifecycle state once.
func (g *Gate) sourcesStarted() error {
	if !g.watching.Load() {
		return errors.New("lifecycle watcher not running")
	}
	if _, known := g.watcher.State(); !known {
		return errors.New("target lifecycle state not read yet")
	}
	return nil
}

// programPresent checks argv[0] of a diagnostic: found (on PATH when it
// has no slash) and executable.
func programPresent(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("no command")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	return nil
}

func check(name string, err error) lifecycle.Check {
	if err != nil {
		return lifecycle.Check{Name: name, Detail: err.Error()}
	}
	return lifecycle.Check{Name: name, OK: true}
}

// warmed reports whether the instance sits in a warm pool now.
func (g *Gate) warmed() bool {
	return g.watcher != nil && g.watcher.Warmed()
}

// State is the agent's state outside a drain, as /readyz and
// /v1/status tell it: "" when intake runs and the instance is in service
// (the drain's own "running"), else warmed, starting or abandoned.
func (g *Gate) State() string {
	switch {
	case g.warmed():
		return StateWarmed
	case g.phase.Load() == launchAbandoned:
		return StateAbandoned
	case g.phase.Load() == launchStarting:
		return StateStarting
	}
	return ""
}

// Status is the launch block of /v1/status: nil without
// launch_hook_name.
func (g *Gate) Status() *lifecycle.LaunchStatus {
	if g.actor == nil || g.cfg.Lifecycle.LaunchHookName == "" {
		return nil
	}
	st := g.actor.LaunchStatus()
	if st.Hook == "" {
		st.Hook = g.cfg.Lifecycle.LaunchHookName
	}
	if st.Checks == nil {
		st.Checks = []lifecycle.Check{}
	}
	return &st
}
