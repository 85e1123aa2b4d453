package agent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

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
	stateWarmed    = "warmed"
	stateStarting  = "starting"
	stateAbandoned = "abandoned"
)

// launchRetry is the pause before the launch sequence runs again after a
// completion of the launch hook failed past its retries.
const launchRetry = lifecycle.LaunchRecheck

// queueReachable is a task queue that can say whether it answers
// (queue.SQS: GetQueueAttributes); the memory queue always does.
type queueReachable interface {
	Reachable(ctx context.Context) error
}

// awaitLaunch runs the launch sequence (lifecycle.GateIntake) before
// intake: it reports true once intake may start, false when it must not
// (the launch was abandoned, or ctx ended: a drain or a fast exit). A
// completion of the launch hook that failed past its retries is tried
// again after launchRetry: the instance is not given work while Auto
// Scaling may still abandon it, nor left idle if the hook's default
// result lets it in.
func (a *Agent) awaitLaunch(ctx context.Context) bool {
	if a.launch.Load() == launchOpen {
		return true
	}
	for {
		err := lifecycle.GateIntake(ctx, a.d.Watcher, a.d.Actor, a.readiness)
		switch {
		case err == nil:
			a.launch.Store(launchOpen)
			a.nudgePresence()
			a.log.Info("intake starts")
			return true
		case errors.Is(err, lifecycle.ErrLaunchAbandoned):
			a.launch.Store(launchAbandoned)
			a.nudgePresence()
			a.log.Error("launch abandoned: no work is taken; waiting for the instance's termination to drain")
			return false
		case ctx.Err() != nil:
			return false
		}
		a.log.Error("launch sequence failed; retrying", "err", err, "retry_in", launchRetry.Seconds())
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
func (a *Agent) nudgePresence() {
	select {
	case a.presence.nudge <- struct{}{}:
	default:
	}
}

// launchGated reports whether intake waits for a launch sequence: a
// launch hook to complete, or the imds source's first read of the target
// lifecycle state (a warm pool). Without either, intake opens with Run.
func (a *Agent) launchGated() bool {
	return a.cfg.Lifecycle.LaunchHookName != "" || (a.d.Watcher != nil && a.cfg.Lifecycle.Has(lifecycle.SourceIMDS))
}

// readiness runs the agent's launch readiness checks once: the config is
// valid, every catalog program is present and executable, the state store
// answers (Redis PING, fleet mode), the task queue answers
// (GetQueueAttributes), and the lifecycle sources have started.
func (a *Agent) readiness(ctx context.Context) []lifecycle.Check {
	checks := []lifecycle.Check{check("config", a.cfg.Validate())}
	for _, d := range a.cfg.Diagnostics {
		checks = append(checks, check("program "+d.Name, programPresent(d.Command)))
	}
	if a.cfg.HasRedis() {
		checks = append(checks, check("redis", a.d.Store.Ping(ctx)))
	}
	if q, ok := a.d.Source.(queueReachable); ok {
		checks = append(checks, check("queue", q.Reachable(ctx)))
	}
	if a.d.Watcher != nil {
		checks = append(checks, check("lifecycle", a.sourcesStarted()))
	}
	return checks
}

// sourcesStarted says whether the lifecycle watcher runs and, with the
// imds source, has read the target lifecycle state once.
func (a *Agent) sourcesStarted() error {
	if !a.watching.Load() {
		return errors.New("lifecycle watcher not running")
	}
	if _, known := a.d.Watcher.State(); !known {
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
func (a *Agent) warmed() bool {
	return a.d.Watcher != nil && a.d.Watcher.Warmed()
}

// launchState is the agent's state outside a drain, as /readyz and
// /v1/status tell it: "" when intake runs and the instance is in service
// (the drain's own "running"), else warmed, starting or abandoned.
func (a *Agent) launchState() string {
	switch {
	case a.warmed():
		return stateWarmed
	case a.launch.Load() == launchAbandoned:
		return stateAbandoned
	case a.launch.Load() == launchStarting:
		return stateStarting
	}
	return ""
}

// launchStatus is the launch block of /v1/status: nil without
// launch_hook_name.
func (a *Agent) launchStatus() *lifecycle.LaunchStatus {
	if a.d.Actor == nil || a.cfg.Lifecycle.LaunchHookName == "" {
		return nil
	}
	st := a.d.Actor.LaunchStatus()
	if st.Hook == "" {
		st.Hook = a.cfg.Lifecycle.LaunchHookName
	}
	if st.Checks == nil {
		st.Checks = []lifecycle.Check{}
	}
	return &st
}
