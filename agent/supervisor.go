package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
)

// Bounds of the supervisor's calls.
const (
	// completionTimeout bounds CompleteLifecycleAction with its retries.
	completionTimeout = 2 * time.Minute
	// probeTimeout bounds one IMDS look for Terminating:Wait.
	probeTimeout = 5 * time.Second
	// resolveTimeout bounds looking up the action's Auto Scaling group.
	resolveTimeout = 10 * time.Second
	// releaseGrace is how long a fast exit waits for cancelled work to
	// record its outcome and hand its message back.
	releaseGrace = 15 * time.Second
)

// sourceRestart is the trigger source of a drain resumed after a restart.
const sourceRestart = "restart"

// drainTrigger is what started the drain, with its lifecycle action when
// the trigger carried one.
type drainTrigger struct {
	drain.Trigger
	action *lifecycle.Action
}

// supervisor owns the drain from its trigger to drained: it stops intake,
// discovers the lifecycle action, persists the drain so a restart resumes
// it, heartbeats the action while work remains and completes it once.
type supervisor struct {
	cfg          lifecycle.Config
	drain        *drain.Controller
	watcher      *lifecycle.Watcher // nil without imds or sqs sources
	actor        *lifecycle.Actor   // nil without imds or sqs sources
	store        state.DrainStore
	storeTimeout time.Duration // redis.timeout
	clock        Clock
	log          *slog.Logger
	m            *metrics
	cloudwatch   *publisher // nil = off
	presence     *presence
	outcomes     *outcomeRecorder
	instanceID   string
	// stopIntake ends the receive loop at the first instant of a drain.
	stopIntake context.CancelFunc
	notifier   *notifier // nil = no sinks
	// hard ends on a fast exit.
	hard context.Context

	mu      sync.Mutex
	trigger *drainTrigger
}

// start begins a drain; the first trigger wins.
func (s *supervisor) start(tr drain.Trigger, action *lifecycle.Action) bool {
	s.mu.Lock()
	if s.trigger != nil {
		s.mu.Unlock()
		return false
	}
	s.trigger = &drainTrigger{Trigger: tr, action: action}
	s.mu.Unlock()
	// Stop intake synchronously: no receive starts after this line.
	s.stopIntake()
	if !s.drain.Start(tr) {
		return false
	}
	s.m.drainState.Set(1)
	s.log.Info("drain started", "source", tr.Source, "reason", tr.Reason, "deadline", s.drain.Progress().Deadline)
	s.notifier.drainStarted(s.drain.Progress())
	return true
}

// resume restarts a drain that a previous process persisted mid-way.
func (s *supervisor) resume() {
	var rec *state.DrainRecord
	err := s.storeCall(func(ctx context.Context) (err error) {
		rec, err = s.store.LoadDrain(ctx, s.instanceID)
		return err
	})
	if err != nil {
		s.log.Warn("load persisted drain", "err", err)
		return
	}
	if rec == nil || rec.Completed {
		return
	}
	var action *lifecycle.Action
	if len(rec.Action) > 0 {
		action = new(lifecycle.Action)
		if err := json.Unmarshal(rec.Action, action); err != nil {
			s.log.Warn("persisted lifecycle action unreadable", "err", err)
			action = nil
		}
	}
	s.log.Info("drain resumed", "source", rec.Source, "deadline", rec.Deadline, "detail", "persisted by this instance's previous process")
	s.start(drain.Trigger{Source: sourceRestart, Reason: "resumed: " + rec.Reason, Deadline: rec.Deadline}, action)
}

// run waits for a drain, keeps its lifecycle action alive while work
// remains, completes it exactly once and moves the agent to drained. ctx
// is the root context: its end is a fast exit.
func (s *supervisor) run(ctx context.Context) error {
	select {
	case <-s.drain.Draining():
	case <-s.hard.Done():
		s.start(drain.Trigger{Source: "fast-exit", Reason: "stopped before any drain"}, nil)
		s.waitReleased()
		return ErrFastExit
	}
	s.mu.Lock()
	tr := s.trigger
	s.mu.Unlock()
	action := s.initialAction(tr)

	// Heartbeats live exactly as long as the work they cover.
	side, stopSide := context.WithCancel(context.WithoutCancel(s.hard))
	var sides sync.WaitGroup
	var late lateAction
	if action != nil {
		sides.Go(func() { s.heartbeat(side, *action) })
	} else if s.actor != nil && (s.cfg.Has(lifecycle.SourceIMDS) || s.cfg.Has(lifecycle.SourceSQS)) {
		// A drain without an action (SIGTERM, POST /v1/drain, a spot
		// notice) keeps watching: Auto Scaling may begin terminating the
		// instance meanwhile, and that action needs heartbeats and a
		// completion too.
		sides.Go(func() {
			act := s.awaitAction(side)
			if act == nil {
				return
			}
			late.set(act)
			s.persist(tr, act, false)
			s.heartbeat(side, *act)
		})
	}
	sides.Go(func() { s.trackDrainDuration(side) })
	if s.cloudwatch != nil {
		sides.Go(func() { s.cloudwatch.drainSeconds(side, s.drain.Progress().StartedAt, action) })
	}

	err := s.drain.Wait(s.hard)
	stopSide()
	sides.Wait()
	fast := s.hard.Err() != nil
	if fast {
		s.waitReleased()
	}
	p := s.drain.Progress()
	if !p.EndedAt.IsZero() {
		s.log.Info("drain work ended", "released", p.Released, "cancelled", p.Cancelled, "timed_out", p.TimedOut)
	}

	if action == nil {
		action = late.get()
	}
	if action == nil && !fast && s.actor != nil {
		// Terminating:Wait may have begun since the last look.
		if action = s.probeAction(s.hard, "drain end"); action != nil {
			s.resolveASG(s.hard, action)
			s.persist(tr, action, false)
		}
	}
	s.notifier.drainEnded(ctx, p, drainResult(s.cfg, action, errors.Is(err, drain.ErrTimedOut)))
	if action != nil {
		s.complete(ctx, *action, errors.Is(err, drain.ErrTimedOut))
	}
	s.persist(tr, action, true)
	s.drain.Finish()
	took := s.clock.Now().Sub(p.StartedAt)
	s.m.drainState.Set(2)
	s.m.drainDuration.Set(took.Seconds())
	s.presence.put(drainedInstanceTTL)
	s.log.Info("drained", "duration", took.Seconds(), "outcomes", s.outcomes.snapshot())
	if fast {
		return ErrFastExit
	}
	return nil
}

// initialAction is the lifecycle action the drain starts with: the
// trigger's, or one IMDS already reports. It is persisted with the drain.
func (s *supervisor) initialAction(tr *drainTrigger) *lifecycle.Action {
	action := tr.action
	if action == nil {
		// A signal on an instance already in Terminating:Wait still owes
		// the Auto Scaling group a completion.
		action = s.probeAction(s.hard, "drain start")
	}
	s.resolveASG(s.hard, action)
	if action != nil && s.actor == nil {
		s.log.Warn("lifecycle action seen but no Auto Scaling client configured; it will time out", "hook", action.HookName)
		action = nil
	}
	s.persist(tr, action, false)
	if action != nil && tr.Source == sourceRestart {
		// The previous process died mid-drain, maybe long ago; what it was
		// running is redelivered by SQS, so this drain ends at once and
		// Heartbeat would stop before its first call. Tell Auto Scaling we
		// are alive first, so a slow completion cannot let the action lapse.
		bctx, cancel := context.WithTimeout(s.hard, max(s.cfg.HeartbeatInterval, time.Second))
		if err := s.actor.Beat(bctx, *action); err != nil {
			s.log.Warn("heartbeat on resuming the drain failed", "err", err)
		}
		cancel()
	}
	return action
}

// complete calls CompleteLifecycleAction on a detached, bounded context so
// that it happens even mid-shutdown.
func (s *supervisor) complete(ctx context.Context, action lifecycle.Action, timedOut bool) {
	result := s.cfg.CompletionResult(timedOut)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completionTimeout)
	defer cancel()
	if err := s.actor.Complete(cctx, action, result); err != nil {
		s.log.Error("CompleteLifecycleAction failed; the hook will time out with its default result", "err", err)
		s.notifier.completionFailed(s.drain.Progress())
		return
	}
	s.log.Info("lifecycle action completed", "result", result, "hook", action.HookName, "asg", action.ASGName)
}

// lateAction is an action discovered during the drain.
type lateAction struct {
	mu     sync.Mutex
	action *lifecycle.Action
}

func (l *lateAction) set(a *lifecycle.Action) { l.mu.Lock(); l.action = a; l.mu.Unlock() }
func (l *lateAction) get() *lifecycle.Action {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.action
}

func (s *supervisor) heartbeat(ctx context.Context, action lifecycle.Action) {
	if err := s.actor.Heartbeat(ctx, action); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("lifecycle heartbeats stopped", "err", err)
	}
}

// awaitAction probes IMDS every imds_poll_interval until the instance is
// in Terminating:Wait (its action, group resolved) or ctx ends (nil).
func (s *supervisor) awaitAction(ctx context.Context) *lifecycle.Action {
	if s.cfg.Has(lifecycle.SourceSQS) {
		return s.watchAction(ctx)
	}
	t := time.NewTicker(s.cfg.IMDSPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if act := s.probeAction(ctx, "draining"); act != nil && ctx.Err() == nil {
			s.actionSeen(act)
			s.resolveASG(ctx, act)
			return act
		}
	}
}

// watchAction runs the lifecycle watcher again during a drain that has no
// action, so a notification on the sqs source (or IMDS turning Terminated)
// still gets heartbeats and a completion. A trigger without an action (a
// spot notice) is skipped after a pause, so a standing notice does not spin.
func (s *supervisor) watchAction(ctx context.Context) *lifecycle.Action {
	for ctx.Err() == nil {
		var act *lifecycle.Action
		if err := s.watcher.Run(ctx, func(tr lifecycle.Trigger) { act = tr.Action }); err != nil {
			s.log.Warn("lifecycle watch during the drain failed", "err", err)
		}
		if act != nil {
			// Returned even when ctx just ended: the notification is ours
			// now and the drain's end completes it.
			s.actionSeen(act)
			s.resolveASG(context.WithoutCancel(ctx), act)
			return act
		}
		t := time.NewTimer(s.cfg.IMDSPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// actionSeen logs a lifecycle action that began during the drain.
func (s *supervisor) actionSeen(act *lifecycle.Action) {
	s.log.Info("lifecycle action during the drain", "hook", act.HookName,
		"detail", "Auto Scaling began terminating the instance; its action is heartbeated and completed")
}

// probeAction asks the imds source whether the instance is in
// Terminating:Wait; nil when it is not, or without an imds source.
func (s *supervisor) probeAction(ctx context.Context, when string) *lifecycle.Action {
	if s.watcher == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	act, err := s.watcher.Probe(pctx)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("lifecycle probe failed", "when", when, "err", err)
	}
	return act
}

// resolveASG fills in the action's Auto Scaling group at the drain's
// start, so completion does not wait for it.
func (s *supervisor) resolveASG(ctx context.Context, action *lifecycle.Action) {
	if action == nil || s.actor == nil || action.ASGName != "" {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	if err := s.actor.ResolveASG(rctx, action); err != nil {
		s.log.Warn("resolving the Auto Scaling group failed", "err", err)
	}
}

// waitReleased gives work cancelled by a fast exit a bounded moment to
// record its outcome and hand its message back.
func (s *supervisor) waitReleased() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseGrace)
	defer cancel()
	_ = s.drain.Wait(ctx)
}

// persist saves the drain so that a restarted agent resumes it.
func (s *supervisor) persist(tr *drainTrigger, action *lifecycle.Action, completed bool) {
	rec := state.DrainRecord{Reason: tr.Reason, Source: tr.Source, Completed: completed}
	p := s.drain.Progress()
	rec.StartedAt, rec.Deadline = p.StartedAt, p.Deadline
	if action != nil {
		rec.Action, _ = json.Marshal(action)
	}
	if err := s.storeCall(func(ctx context.Context) error { return s.store.SaveDrain(ctx, s.instanceID, rec) }); err != nil {
		s.log.Warn("persisting drain state failed", "err", err)
	}
}

// trackDrainDuration keeps autodiag_drain_duration_seconds current.
func (s *supervisor) trackDrainDuration(ctx context.Context) {
	start := s.drain.Progress().StartedAt
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.m.drainDuration.Set(s.clock.Now().Sub(start).Seconds())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// storeCall runs one store call, bounded by redis.timeout.
func (s *supervisor) storeCall(call func(context.Context) error) error {
	return callWithin(s.storeTimeout, call)
}
