package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
)

// Bounds of the supervisor's calls.
const (
	// CompletionTimeout bounds CompleteLifecycleAction with its retries.
	CompletionTimeout = 2 * time.Minute
	// probeTimeout bounds one IMDS look for Terminating:Wait.
	probeTimeout = 5 * time.Second
	// ResolveTimeout bounds looking up the action's Auto Scaling group.
	ResolveTimeout = 10 * time.Second
	// ReleaseGrace is how long a fast exit waits for cancelled work to
	// record its outcome and hand its message back.
	ReleaseGrace = 15 * time.Second
)

// sourceRestart is the trigger source of a drain resumed after a restart.
const sourceRestart = "restart"

// drainTrigger is what started the drain, with its lifecycle action when
// the trigger carried one.
type drainTrigger struct {
	drain.Trigger
	action *lifecycle.Action
	// since is when a resumed drain first started, in the process that
	// persisted it; zero for a drain of this process.
	since time.Time
}

// Supervisor owns the drain from its trigger to drained: it stops intake,
// discovers the lifecycle action, persists the drain so a restart resumes
// it, heartbeats the action while work remains and completes it once.
type Supervisor struct {
	cfg        lifecycle.Config
	drain      *drain.Controller
	actions    *actions
	records    *drainStore
	clock      clock.Clock
	log        *slog.Logger
	m          Gauges
	cloudwatch Publisher // nil = off
	presence   InstanceRecord
	outcomes   func() map[string]int64
	// stopIntake ends the receive loop at the first instant of a drain.
	stopIntake context.CancelFunc
	hooks      Hooks

	mu      sync.Mutex
	trigger *drainTrigger
}

// start begins a drain; the first trigger wins.
func (s *Supervisor) Start(tr drain.Trigger, action *lifecycle.Action) bool {
	return s.startSince(tr, action, time.Time{})
}

// startSince is start for a drain that began at since in a previous
// process (zero = now): DrainSeconds and the persisted record keep
// counting from then, so restarts do not hide a drain that is stuck.
func (s *Supervisor) startSince(tr drain.Trigger, action *lifecycle.Action, since time.Time) bool {
	s.mu.Lock()
	if s.trigger != nil {
		s.mu.Unlock()
		return false
	}
	s.trigger = &drainTrigger{Trigger: tr, action: action, since: since}
	s.mu.Unlock()
	// Stop intake synchronously: no receive starts after this line.
	s.stopIntake()
	if !s.drain.Start(tr) {
		return false
	}
	p := s.drain.Progress()
	deadline := p.Deadline
	// The deadline before the state: a scrape between the two sees a
	// drain with its deadline, never one whose deadline reads 0.
	s.m.DrainDeadline.Set(float64(deadline.UnixNano()) / 1e9)
	s.m.DrainState.Set(1)
	// running and queued are the work the drain took on at its start (under
	// queued: release the unstarted is already handed back). A task is
	// running from when it has a worker, before its lease and limiter
	// decision, so its diagnostic may begin after this line: a reader
	// timing the drain against what was running counts those too.
	s.log.Info("drain started", "source", tr.Source, "reason", tr.Reason, "deadline", deadline,
		"running", p.Running, "queued", p.Queued)
	s.hooks.DrainStarted(p)
	return true
}

// resume restarts a drain that a previous process persisted mid-way,
// unless instance metadata says the instance is InService: then the drain
// was not a termination (or Auto Scaling has since put the instance back)
// and resuming it would only stop the agent again.
func (s *Supervisor) Resume(ctx context.Context) {
	rec, err := s.records.load(ctx)
	if err != nil {
		s.log.Warn("load persisted drain", "err", err)
		return
	}
	if rec == nil || rec.Completed {
		return
	}
	if st := s.actions.lifecycleState(ctx); st == lifecycleInService {
		s.log.Info("persisted drain discarded", "source", rec.Source, "reason", rec.Reason,
			"detail", "instance metadata says InService: the instance is not terminating, so the agent keeps running")
		rec.Completed = true
		if err := s.records.save(ctx, *rec); err != nil {
			s.log.Warn("marking the discarded drain done failed", "err", err)
		}
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
	s.startSince(drain.Trigger{Source: sourceRestart, Reason: "resumed: " + rec.Reason, Deadline: rec.Deadline}, action, rec.StartedAt)
}

// lifecycleInService is the target lifecycle state of an instance that
// Auto Scaling is not terminating.
const lifecycleInService = "InService"

// run waits for a drain, keeps its lifecycle action alive while work
// remains, completes it exactly once and moves the agent to drained. ctx
// is the root context: its end is a fast exit (ErrFastExit), and calls
// that must happen all the same run on contexts detached from it. It reports
// how the drain ended (see Ending); a completion that failed is an error.
func (s *Supervisor) Run(ctx context.Context) (Ending, error) {
	select {
	case <-s.drain.Draining():
	case <-ctx.Done():
		s.Start(drain.Trigger{Source: "fast-exit", Reason: "stopped before any drain"}, nil)
		s.waitReleased(ctx)
		return 0, ErrFastExit
	}
	s.mu.Lock()
	tr := s.trigger
	s.mu.Unlock()
	// The drain is a trace of its own: trigger, heartbeats, completion.
	ctx, span := startDrainSpan(ctx, tr.Trigger)
	defer span.End()
	action := s.initialAction(ctx, tr)
	// known is the action as far as it is known: at the start, found
	// during the drain or at its end. DrainSeconds takes its group.
	var known lateAction
	known.set(action)

	// DrainSeconds lasts until the completion has ended, not just the
	// drain's work: a completion that keeps failing keeps it rising.
	pub, stopPub := context.WithCancel(context.WithoutCancel(ctx))
	var publishing sync.WaitGroup
	if s.cloudwatch != nil {
		start := s.drain.Progress().StartedAt
		if !tr.since.IsZero() {
			start = tr.since
		}
		publishing.Go(func() { s.cloudwatch.DrainSeconds(pub, start, known.group) })
	}
	defer func() { stopPub(); publishing.Wait() }()

	// Heartbeats live exactly as long as the work they cover.
	side, stopSide := context.WithCancel(context.WithoutCancel(ctx))
	var sides sync.WaitGroup
	var late lateAction
	if action != nil {
		sides.Go(func() { s.actions.heartbeat(side, *action) })
	} else if s.actions.actor != nil && (s.cfg.Has(lifecycle.SourceIMDS) || s.cfg.Has(lifecycle.SourceSQS)) {
		// A drain without an action (SIGTERM, POST /v1/drain, a spot
		// notice) keeps watching: Auto Scaling may begin terminating the
		// instance meanwhile, and that action needs heartbeats and a
		// completion too.
		sides.Go(func() {
			act := s.actions.awaitAction(side)
			if act == nil {
				return
			}
			late.set(act)
			known.set(act)
			s.records.persist(side, tr, act, false)
			s.actions.heartbeat(side, *act)
		})
	}
	sides.Go(func() { s.trackDrainDuration(side) })

	err := s.drain.Wait(ctx)
	stopSide()
	sides.Wait()
	fast := ctx.Err() != nil
	if fast {
		s.waitReleased(ctx)
	}
	p := s.drain.Progress()
	traceDrainWork(span, p)
	if !p.EndedAt.IsZero() {
		s.log.Info("drain work ended", "released", p.Released, "cancelled", p.Cancelled, "timed_out", p.TimedOut)
	}

	if action == nil {
		action = late.get()
	}
	if action == nil && !fast && s.actions.actor != nil {
		// Terminating:Wait may have begun since the last look.
		if action = s.actions.probeAction(ctx, "drain end"); action != nil {
			s.actions.resolveASG(ctx, action)
			known.set(action)
			s.records.persist(ctx, tr, action, false)
		}
	}
	var completeErr error
	s.hooks.DrainEnded(ctx, p, action, errors.Is(err, drain.ErrTimedOut))
	if action != nil {
		completeErr = s.actions.complete(ctx, *action, errors.Is(err, drain.ErrTimedOut))
	}
	stopPub()
	publishing.Wait()
	// A failed completion stays unfinished in the store, so the restarted
	// agent resumes the drain and completes the action.
	s.records.persist(ctx, tr, action, completeErr == nil)
	s.drain.Finish()
	took := s.clock.Now().Sub(p.StartedAt)
	s.m.DrainState.Set(2)
	s.m.DrainDuration.Set(took.Seconds())
	s.presence.Drained(ctx)
	ending := drainEnding(tr.Source, action != nil, s.actions.toWarmPool())
	traceEnding(span, ending.String(), completeErr)
	s.log.InfoContext(ctx, "drained", "duration", took.Seconds(), "outcomes", s.outcomes(), "ending", ending.String())
	switch {
	case fast:
		return ending, ErrFastExit
	case completeErr != nil:
		return ending, completeErr
	}
	return ending, nil
}

// drainEnding classifies a drain that finished: an instance going back to
// its warm pool stays and comes back into service (Drained); a drain that
// ended a lifecycle action, or whose trigger says the instance or the
// service is going away (a signal, a spot notice, a rebalance
// recommendation, a maintenance event), is Done: a restarted agent would
// only find the standing notice and drain again. Any other drain (POST
// /v1/drain, a drain resumed without an action) leaves the instance
// running (Drained).
func drainEnding(source string, hadAction, toWarmPool bool) Ending {
	switch {
	case toWarmPool:
		return EndingDrained
	case hadAction:
		return EndingDone
	case source == lifecycle.SourceSignal, source == lifecycle.TriggerSpot,
		source == lifecycle.TriggerRebalance, source == lifecycle.TriggerMaintenance:
		return EndingDone
	}
	return EndingDrained
}

// initialAction is the lifecycle action the drain starts with: the
// trigger's, or one IMDS already reports. It is persisted with the drain.
func (s *Supervisor) initialAction(ctx context.Context, tr *drainTrigger) *lifecycle.Action {
	action := tr.action
	if action == nil {
		// A signal on an instance already in Terminating:Wait still owes
		// the Auto Scaling group a completion.
		action = s.actions.probeAction(ctx, "drain start")
	}
	s.actions.resolveASG(ctx, action)
	if action != nil && s.actions.actor == nil {
		s.log.Warn("lifecycle action seen but no Auto Scaling client configured; it will time out", "hook", action.HookName)
		action = nil
	}
	s.records.persist(ctx, tr, action, false)
	if action != nil && tr.Source == sourceRestart {
		// The previous process died mid-drain, maybe long ago; what it was
		// running is redelivered by SQS, so this drain ends at once and
		// Heartbeat would stop before its first call. Tell Auto Scaling we
		// are alive first, so a slow completion cannot let the action lapse.
		bctx, cancel := context.WithTimeout(ctx, max(s.cfg.HeartbeatInterval, time.Second))
		if err := s.actions.actor.Beat(bctx, *action); err != nil {
			s.log.Warn("heartbeat on resuming the drain failed", "err", err)
		}
		cancel()
	}
	return action
}

// waitReleased gives work cancelled by a fast exit a bounded moment to
// record its outcome and hand its message back.
func (s *Supervisor) waitReleased(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseGrace)
	defer cancel()
	_ = s.drain.Wait(ctx)
}

// trackDrainDuration keeps autodiag_drain_duration_seconds current.
func (s *Supervisor) trackDrainDuration(ctx context.Context) {
	start := s.drain.Progress().StartedAt
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.m.DrainDuration.Set(s.clock.Now().Sub(start).Seconds())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
