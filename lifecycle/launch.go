package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Destinations of a launching lifecycle action: an instance launched into
// a group with a warm pool goes through the launch hook once into the pool
// and once more when it leaves the pool for the group.
const (
	DestinationGroup    = "AutoScalingGroup"
	DestinationWarmPool = "WarmPool"
)

// LaunchRecheck is how often LaunchGate runs the readiness checks again
// while they fail.
const LaunchRecheck = 3 * time.Second

// launchCheckTimeout bounds one round of readiness checks, so a hung check
// (an unreachable Redis) cannot hold the gate past launch_timeout.
const launchCheckTimeout = 10 * time.Second

// Check is the result of one readiness check of the agent: config valid,
// a catalog program present, Redis answering, the task queue reachable, the
// lifecycle sources started.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"` // why not, when not OK
}

// ReadinessFunc runs every readiness check once. ctx bounds the round.
type ReadinessFunc func(ctx context.Context) []Check

// LaunchStatus is what the agent shows of the launch hook in /v1/status:
// the latest readiness checks, whether they all passed, and the completion.
type LaunchStatus struct {
	Hook        string    `json:"hook"`
	Destination string    `json:"destination,omitempty"`
	Ready       bool      `json:"ready"`
	Checks      []Check   `json:"checks"`
	CheckedAt   time.Time `json:"checked_at,omitzero"`
	Deadline    time.Time `json:"deadline,omitzero"` // when the gate abandons
	Heartbeats  int       `json:"heartbeats"`
	Completed   bool      `json:"completed"`
	Result      string    `json:"result,omitempty"` // CONTINUE | ABANDON as sent
	// NoActiveAction: Auto Scaling had no launching action for this
	// instance (it was completed before, or timed out).
	NoActiveAction bool `json:"no_active_action,omitempty"`
}

// failing returns "name: detail" of every failed check.
func failing(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

func allOK(checks []Check) bool {
	return len(checks) > 0 && !slices.ContainsFunc(checks, func(c Check) bool { return !c.OK })
}

// ErrNoLaunchHook is returned by LaunchGate when launch_hook_name is empty.
var ErrNoLaunchHook = errors.New("lifecycle: no launch hook configured")

// LaunchGate holds the launching lifecycle action of this instance (hook
// launch_hook_name, completed by instance id) until the agent is ready:
// it runs ready at once and every LaunchRecheck while a check fails,
// heartbeats the action every heartbeat_interval meanwhile, and completes
// it exactly once: CONTINUE as soon as every check passes, ABANDON (the
// failing checks logged) when they still fail launch_timeout after the
// call. The completion is retried like Complete's, on a context detached
// from ctx and bounded by DefaultCompleteTimeout; "No active Lifecycle
// Action found" counts as done. It returns the result sent.
//
// destination is DestinationWarmPool while the instance is in a warm pool
// (Watcher.Warmed), else DestinationGroup; each destination's action is
// completed once: a second call for it returns the first result without
// calling Auto Scaling. When ctx ends before a result is decided, nothing
// is completed and ctx.Err() is returned (the action then ends at its
// heartbeat timeout with the hook's default result). Without
// launch_hook_name it returns ErrNoLaunchHook. LaunchStatus reports the
// progress meanwhile.
func (a *Actor) LaunchGate(ctx context.Context, destination string, ready ReadinessFunc) (string, error) {
	if a.cfg.LaunchHookName == "" {
		return "", ErrNoLaunchHook
	}
	if destination != DestinationGroup && destination != DestinationWarmPool {
		return "", fmt.Errorf("lifecycle: launch gate: destination %q is neither %s nor %s", destination, DestinationGroup, DestinationWarmPool)
	}
	if a.d.AutoScaling == nil || a.d.InstanceID == "" {
		return "", errors.New("lifecycle: launch gate: needs the Auto Scaling client and the instance id")
	}
	a.launchMu.Lock()
	defer a.launchMu.Unlock()
	if prev, ok := a.launched[destination]; ok {
		return prev, nil
	}

	timeout := a.cfg.LaunchTimeout
	if timeout <= 0 {
		timeout = DefaultConfig().LaunchTimeout
	}
	start := a.d.Clock.Now()
	deadline := start.Add(timeout)
	act := Action{InstanceID: a.d.InstanceID, ASGName: a.cfg.ASGName, HookName: a.cfg.LaunchHookName, Started: start}
	a.mu.Lock()
	a.launch = LaunchStatus{Hook: act.HookName, Destination: destination, Deadline: deadline, Checks: []Check{}}
	a.mu.Unlock()
	rctx, rcancel := context.WithTimeout(ctx, timeout)
	err := a.ResolveASG(rctx, &act)
	rcancel()
	if err != nil {
		return "", fmt.Errorf("lifecycle: launch gate: %w", err)
	}
	log := a.log.With("instance_id", act.InstanceID, "asg", act.ASGName, "hook", act.HookName, "destination", destination)

	// Heartbeats live until the completion is over: they also keep the
	// action alive while the completion is retried.
	hbCtx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		a.launchHeartbeats(hbCtx, act, log)
	}()
	defer func() {
		stopBeats()
		<-beatsDone
	}()

	result, checks, err := a.awaitReady(ctx, deadline, ready)
	if err != nil {
		return "", err
	}
	if result == ResultAbandon {
		log.Error("not ready by launch_timeout; abandoning the launch (the instance is replaced)",
			"launch_timeout_seconds", timeout.Seconds(), "failing", strings.Join(failing(checks), "; "))
	} else {
		log.Info("ready; continuing the launch", "waited_seconds", a.d.Clock.Now().Sub(start).Seconds())
	}

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCompleteTimeout)
	defer cancel()
	outcome, err := a.complete(cctx, act, result, nil, nil, log.With("result", result))
	if err != nil {
		return "", fmt.Errorf("lifecycle: launch gate: %w", err)
	}
	a.launched[destination] = result
	a.mu.Lock()
	a.launch.Completed = true
	a.launch.Result = result
	a.launch.NoActiveAction = outcome == "no_action"
	a.mu.Unlock()
	return result, nil
}

// awaitReady runs the checks until they all pass (CONTINUE) or deadline
// (ABANDON), recording each round in the launch status.
func (a *Actor) awaitReady(ctx context.Context, deadline time.Time, ready ReadinessFunc) (string, []Check, error) {
	for {
		now := a.d.Clock.Now()
		rctx, cancel := context.WithTimeout(ctx, min(launchCheckTimeout, max(deadline.Sub(now), time.Second)))
		checks := ready(rctx)
		cancel()
		if ctx.Err() != nil {
			return "", checks, ctx.Err()
		}
		ok := allOK(checks)
		a.mu.Lock()
		a.launch.Checks = slices.Clone(checks)
		a.launch.Ready = ok
		a.launch.CheckedAt = a.d.Clock.Now()
		a.mu.Unlock()
		if ok {
			return ResultContinue, checks, nil
		}
		left := deadline.Sub(a.d.Clock.Now())
		if left <= 0 {
			return ResultAbandon, checks, nil
		}
		if err := sleep(ctx, a.d.Clock, min(LaunchRecheck, left)); err != nil {
			return "", checks, err
		}
	}
}

// launchHeartbeats beats the launching action at once and every
// heartbeat_interval until ctx ends or the action is gone.
func (a *Actor) launchHeartbeats(ctx context.Context, act Action, log *slog.Logger) {
	interval := a.cfg.HeartbeatInterval
	if interval <= 0 {
		interval = DefaultConfig().HeartbeatInterval
	}
	next := a.d.Clock.Now()
	for {
		next = next.Add(interval)
		err := a.beatOnce(ctx, act, interval, next, nil, log)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			a.mu.Lock()
			a.launch.Heartbeats++
			a.mu.Unlock()
		case isNoActiveAction(err):
			log.Warn("no active launching action; heartbeats stop", "err", err)
			return
		default:
			log.Error("launch heartbeat failed until the next one was due", "err", err)
		}
		if sleep(ctx, a.d.Clock, next.Sub(a.d.Clock.Now())) != nil {
			return
		}
	}
}

// LaunchStatus returns a snapshot of the launch gate for status reporting
// (zero until LaunchGate is called).
func (a *Actor) LaunchStatus() LaunchStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.launch
	st.Checks = slices.Clone(st.Checks)
	return st
}

// ErrLaunchAbandoned is returned by GateIntake when the launch was
// completed with ABANDON: the instance is being replaced and takes no work.
var ErrLaunchAbandoned = errors.New("lifecycle: launch abandoned: not ready by launch_timeout")

// LaunchDestination waits for the first target-lifecycle-state read and
// returns where this instance's launching action is taking it:
// DestinationWarmPool while the state is Warmed:*, else DestinationGroup
// (also without the imds source). Run must be running.
func (w *Watcher) LaunchDestination(ctx context.Context) (string, error) {
	for {
		w.mu.Lock()
		changed := w.changed
		w.mu.Unlock()
		state, known := w.State()
		if known {
			if IsWarmed(state) {
				return DestinationWarmPool, nil
			}
			return DestinationGroup, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-changed:
		}
	}
}

// GateIntake is the launch sequence of an agent, run once at start beside
// Watcher.Run: it returns nil when intake may start. With launch_hook_name
// set it holds the launching action until ready (LaunchGate, destination
// from LaunchDestination); then it waits while the instance sits in a warm
// pool (WaitInService) and, when it leaves the pool, gates the second
// launching action (destination AutoScalingGroup) the same way. w nil means
// no imds source (no warm pool to wait for). It returns
// ErrLaunchAbandoned when a launch was abandoned, ctx.Err() when ctx ends
// first, and LaunchGate's error when a completion failed.
func GateIntake(ctx context.Context, w *Watcher, a *Actor, ready ReadinessFunc) error {
	hook := a != nil && a.cfg.LaunchHookName != ""
	gate := func(dest string) error {
		if !hook {
			return nil
		}
		res, err := a.LaunchGate(ctx, dest, ready)
		if err != nil {
			return err
		}
		if res == ResultAbandon {
			return ErrLaunchAbandoned
		}
		return nil
	}
	if w == nil {
		return gate(DestinationGroup)
	}
	dest, err := w.LaunchDestination(ctx)
	if err != nil {
		return err
	}
	if err := gate(dest); err != nil {
		return err
	}
	warmed, err := w.WaitInService(ctx)
	if err != nil {
		return err
	}
	if warmed && dest == DestinationWarmPool {
		return gate(DestinationGroup)
	}
	return nil
}
