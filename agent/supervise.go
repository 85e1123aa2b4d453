package agent

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
)

// cloudWatchAPI is the part of *cloudwatch.Client the agent uses.
type cloudWatchAPI interface {
	PutMetricData(ctx context.Context, params *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ cloudWatchAPI = (*cloudwatch.Client)(nil)

// completionTimeout bounds CompleteLifecycleAction with its retries.
const completionTimeout = 2 * time.Minute

// supervise waits for a drain, keeps its lifecycle action alive while work
// remains, completes it exactly once and moves the agent to drained.
func (a *Agent) supervise(ctx context.Context) error {
	select {
	case <-a.drain.Draining():
	case <-a.hard.Done():
		a.startDrain(drain.Trigger{Source: "fast-exit", Reason: "stopped before any drain"}, nil)
		a.waitReleased()
		return ErrFastExit
	}
	a.mu.Lock()
	tr := a.trigger
	a.mu.Unlock()
	action := tr.action
	if action == nil {
		// A signal on an instance already in Terminating:Wait still owes
		// the Auto Scaling group a completion.
		action = a.probeAction(a.hard, "drain start")
	}
	a.resolveASG(a.hard, action)
	if action != nil && a.d.Actor == nil {
		a.log.Warn("lifecycle action seen but no Auto Scaling client configured; it will time out", "hook", action.HookName)
		action = nil
	}
	a.persistDrain(tr, action, false)
	if action != nil && tr.Source == sourceRestart {
		// The previous process died mid-drain, maybe long ago; what it was
		// running is redelivered by SQS, so this drain ends at once and
		// Heartbeat would stop before its first call. Tell Auto Scaling we
		// are alive first, so a slow completion cannot let the action lapse.
		bctx, cancel := context.WithTimeout(a.hard, max(a.cfg.Lifecycle.HeartbeatInterval, time.Second))
		if err := a.d.Actor.Beat(bctx, *action); err != nil {
			a.log.Warn("heartbeat on resuming the drain failed", "err", err)
		}
		cancel()
	}

	// Heartbeats live exactly as long as the work they cover.
	side, stopSide := context.WithCancel(context.WithoutCancel(a.hard))
	sideDone := make(chan struct{}, 4)
	sides := 0
	if action != nil {
		sides++
		go func() {
			defer func() { sideDone <- struct{}{} }()
			a.heartbeat(side, *action)
		}()
	}
	// A drain without an action (SIGTERM, POST /v1/drain, a spot notice)
	// keeps watching IMDS: Auto Scaling may begin terminating the instance
	// meanwhile, and that action needs heartbeats and a completion too.
	var late struct {
		sync.Mutex
		action *lifecycle.Action
	}
	if action == nil && a.d.Actor != nil && (a.cfg.Lifecycle.Has(lifecycle.SourceIMDS) || a.cfg.Lifecycle.Has(lifecycle.SourceSQS)) {
		sides++
		go func() {
			defer func() { sideDone <- struct{}{} }()
			act := a.awaitAction(side)
			if act == nil {
				return
			}
			late.Lock()
			late.action = act
			late.Unlock()
			a.persistDrain(tr, act, false)
			a.heartbeat(side, *act)
		}()
	}
	sides++
	go func() { defer func() { sideDone <- struct{}{} }(); a.trackDrainDuration(side) }()
	if a.d.CloudWatch != nil {
		sides++
		go func() { defer func() { sideDone <- struct{}{} }(); a.publishDrainSeconds(side, action) }()
	}

	err := a.drain.Wait(a.hard)
	stopSide()
	for range sides {
		<-sideDone
	}
	fast := a.hard.Err() != nil
	if fast {
		a.waitReleased()
	}
	p := a.drain.Progress()
	if !p.EndedAt.IsZero() {
		a.log.Info("drain work ended", "released", p.Released, "cancelled", p.Cancelled, "timed_out", p.TimedOut)
	}

	if action == nil {
		late.Lock()
		action = late.action
		late.Unlock()
	}
	if action == nil && !fast && a.d.Actor != nil {
		// Terminating:Wait may have begun since the last look.
		if action = a.probeAction(a.hard, "drain end"); action != nil {
			a.resolveASG(a.hard, action)
			a.persistDrain(tr, action, false)
		}
	}
	if action != nil {
		result := a.cfg.Lifecycle.CompletionResult(errors.Is(err, drain.ErrTimedOut))
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completionTimeout)
		cerr := a.d.Actor.Complete(cctx, *action, result)
		cancel()
		if cerr != nil {
			a.log.Error("CompleteLifecycleAction failed; the hook will time out with its default result", "err", cerr)
		} else {
			a.log.Info("lifecycle action completed", "result", result, "hook", action.HookName, "asg", action.ASGName)
		}
	}
	a.persistDrain(tr, action, true)
	a.drain.Finish()
	a.m.drainState.Set(2)
	a.m.drainDuration.Set(time.Since(p.StartedAt).Seconds())
	a.putInstance(time.Minute)
	a.log.Info("drained", "duration", time.Since(p.StartedAt), "outcomes", a.outcomeCounts())
	if fast {
		return ErrFastExit
	}
	return nil
}

func (a *Agent) heartbeat(ctx context.Context, action lifecycle.Action) {
	if err := a.d.Actor.Heartbeat(ctx, action); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Warn("lifecycle heartbeats stopped", "err", err)
	}
}

// awaitAction probes IMDS every imds_poll_interval until the instance is
// in Terminating:Wait (its action, group resolved) or ctx ends (nil).
func (a *Agent) awaitAction(ctx context.Context) *lifecycle.Action {
	if a.cfg.Lifecycle.Has(lifecycle.SourceSQS) {
		return a.watchAction(ctx)
	}
	t := time.NewTicker(a.cfg.Lifecycle.IMDSPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if act := a.probeAction(ctx, "draining"); act != nil && ctx.Err() == nil {
			a.log.Info("Auto Scaling began terminating the instance during the drain; heartbeating its lifecycle action", "hook", act.HookName)
			a.resolveASG(ctx, act)
			return act
		}
	}
}

// watchAction runs the lifecycle watcher again during a drain that has no
// action, so a notification on the sqs source (or IMDS turning Terminated)
// still gets heartbeats and a completion. A trigger without an action (a
// spot notice) is skipped after a pause, so a standing notice does not spin.
func (a *Agent) watchAction(ctx context.Context) *lifecycle.Action {
	for ctx.Err() == nil {
		var act *lifecycle.Action
		if err := a.d.Watcher.Run(ctx, func(tr lifecycle.Trigger) { act = tr.Action }); err != nil {
			a.log.Warn("lifecycle watch during the drain failed", "err", err)
		}
		if act != nil {
			// Returned even when ctx just ended: the notification is ours
			// now and the drain's end completes it.
			a.log.Info("Auto Scaling began terminating the instance during the drain; heartbeating its lifecycle action", "hook", act.HookName)
			a.resolveASG(context.WithoutCancel(ctx), act)
			return act
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.cfg.Lifecycle.IMDSPollInterval):
		}
	}
	return nil
}

// probeAction asks the imds source whether the instance is in
// Terminating:Wait; nil when it is not, or without an imds source.
func (a *Agent) probeAction(ctx context.Context, when string) *lifecycle.Action {
	if a.d.Watcher == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	act, err := a.d.Watcher.Probe(pctx)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("lifecycle probe failed", "when", when, "err", err)
	}
	return act
}

// resolveASG fills in the action's Auto Scaling group at the drain's
// start, so completion does not wait for it.
func (a *Agent) resolveASG(ctx context.Context, action *lifecycle.Action) {
	if action == nil || a.d.Actor == nil || action.ASGName != "" {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.d.Actor.ResolveASG(rctx, action); err != nil {
		a.log.Warn("resolving the Auto Scaling group failed", "err", err)
	}
}

// waitReleased gives work cancelled by a fast exit a bounded moment to
// record its outcome and hand its message back.
func (a *Agent) waitReleased() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = a.drain.Wait(ctx)
}

func (a *Agent) persistDrain(tr *drainTrigger, action *lifecycle.Action, completed bool) {
	rec := state.DrainRecord{Reason: tr.Reason, Source: tr.Source, Completed: completed}
	p := a.drain.Progress()
	rec.StartedAt, rec.Deadline = p.StartedAt, p.Deadline
	if action != nil {
		rec.Action, _ = json.Marshal(action)
	}
	ctx, cancel := a.callCtx()
	defer cancel()
	if err := a.d.Store.SaveDrain(ctx, a.d.InstanceID, rec); err != nil {
		a.log.Warn("persisting drain state failed", "err", err)
	}
}

func (a *Agent) trackDrainDuration(ctx context.Context) {
	start := a.drain.Progress().StartedAt
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		a.m.drainDuration.Set(time.Since(start).Seconds())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishDrainSeconds puts DrainSeconds every minute while draining, so a
// CloudWatch alarm can catch a drain stuck in Terminating:Wait.
func (a *Agent) publishDrainSeconds(ctx context.Context, action *lifecycle.Action) {
	asg := a.d.ASGName
	if action != nil && action.ASGName != "" {
		asg = action.ASGName
	}
	if asg == "" {
		asg = a.cfg.Lifecycle.ASGName
	}
	if asg == "" {
		a.log.Warn("DrainSeconds not published: Auto Scaling group unknown (set lifecycle.asg_name)")
		return
	}
	start := a.drain.Progress().StartedAt
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		err := a.putMetric(ctx, "DrainSeconds", cwtypes.StandardUnitSeconds, time.Since(start).Seconds(), asg)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("publishing DrainSeconds failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) outcomeCounts() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int64, len(a.outcomes))
	for k, v := range a.outcomes {
		out[k] = v
	}
	return out
}
