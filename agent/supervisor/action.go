package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
)

// actions finds the drain's lifecycle action (at the start, during the
// drain, at its end), heartbeats it and completes it.
type actions struct {
	cfg     lifecycle.Config
	watcher Watcher // nil without imds or sqs sources
	actor   Actor   // nil without imds or sqs sources
	drain   *drain.Controller
	hooks   Hooks
	log     *slog.Logger
}

// lifecycleState is the instance's target lifecycle state from IMDS, ""
// when unknown (no imds source, or IMDS did not answer).
func (a *actions) lifecycleState(ctx context.Context) string {
	if a.watcher == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := a.watcher.TargetLifecycleState(ctx)
	if err != nil {
		a.log.Warn("reading the target lifecycle state failed", "err", err)
		return ""
	}
	return st
}

// toWarmPool reports whether the instance's last target lifecycle state
// sends it (back) to its warm pool, where it stays running or stopped and
// comes back into service later: Warmed:*, but not Warmed:Terminated.
func (a *actions) toWarmPool() bool {
	if a.watcher == nil {
		return false
	}
	st, _ := a.watcher.State()
	return lifecycle.IsWarmed(st) && st != lifecycle.StateWarmedTerminated
}

// complete calls CompleteLifecycleAction on a detached, bounded context so
// that it happens even mid-shutdown. Success includes Auto Scaling
// answering that no action is active any more.
func (a *actions) complete(ctx context.Context, action lifecycle.Action, timedOut bool) error {
	result := a.cfg.CompletionResult(timedOut)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CompletionTimeout)
	defer cancel()
	cctx, span := startCompletion(cctx, action, result)
	defer span.End()
	if err := a.actor.Complete(cctx, action, result); err != nil {
		tracing.Fail(span, err)
		a.log.Error("CompleteLifecycleAction failed; the hook will time out with its default result", "err", err)
		a.hooks.CompletionFailed(a.drain.Progress())
		return fmt.Errorf("%w: %w", ErrCompletionFailed, err)
	}
	a.log.Info("lifecycle action completed", "result", result, "hook", action.HookName, "asg", action.ASGName)
	return nil
}

func (a *actions) heartbeat(ctx context.Context, action lifecycle.Action) {
	ctx, span := tracing.Start(ctx, "lifecycle heartbeats", trace.SpanKindInternal, attribute.String("aws.autoscaling.hook.name", action.HookName))
	defer span.End()
	if err := a.actor.Heartbeat(ctx, action); err != nil && !errors.Is(err, context.Canceled) {
		tracing.Fail(span, err)
		a.log.Warn("lifecycle heartbeats stopped", "err", err)
	}
}

// awaitAction probes IMDS every imds_poll_interval until the instance is
// in Terminating:Wait (its action, group resolved) or ctx ends (nil).
func (a *actions) awaitAction(ctx context.Context) *lifecycle.Action {
	if a.cfg.Has(lifecycle.SourceSQS) {
		return a.watchAction(ctx)
	}
	t := time.NewTicker(a.cfg.IMDSPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if act := a.probeAction(ctx, "draining"); act != nil && ctx.Err() == nil {
			a.actionSeen(act)
			a.resolveASG(ctx, act)
			return act
		}
	}
}

// watchAction runs the lifecycle watcher again during a drain that has no
// action, so a notification on the sqs source (or IMDS turning Terminated)
// still gets heartbeats and a completion. A trigger without an action (a
// spot notice) is skipped after a pause, so a standing notice does not spin.
func (a *actions) watchAction(ctx context.Context) *lifecycle.Action {
	for ctx.Err() == nil {
		var act *lifecycle.Action
		if err := a.watcher.Run(ctx, func(tr lifecycle.Trigger) { act = tr.Action }); err != nil {
			a.log.Warn("lifecycle watch during the drain failed", "err", err)
		}
		if act != nil {
			// Returned even when ctx just ended: the notification is ours
			// now and the drain's end completes it.
			a.actionSeen(act)
			a.resolveASG(context.WithoutCancel(ctx), act)
			return act
		}
		t := time.NewTimer(a.cfg.IMDSPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// actionSeen logs a lifecycle action that began during the drain.
func (a *actions) actionSeen(act *lifecycle.Action) {
	a.log.Info("lifecycle action during the drain", "hook", act.HookName,
		"detail", "Auto Scaling began terminating the instance; its action is heartbeated and completed")
}

// probeAction asks the imds source whether the instance is in
// Terminating:Wait; nil when it is not, or without an imds source.
func (a *actions) probeAction(ctx context.Context, when string) *lifecycle.Action {
	if a.watcher == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	act, err := a.watcher.Probe(pctx)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("lifecycle probe failed", "when", when, "err", err)
	}
	return act
}

// resolveASG fills in the action's Auto Scaling group at the drain's
// start, so completion does not wait for it.
func (a *actions) resolveASG(ctx context.Context, action *lifecycle.Action) {
	if action == nil || a.actor == nil || action.ASGName != "" {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	if err := a.actor.ResolveASG(rctx, action); err != nil {
		a.log.Warn("resolving the Auto Scaling group failed", "err", err)
	}
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

// group is the action's Auto Scaling group, "" without an action.
func (l *lateAction) group() string {
	if a := l.get(); a != nil {
		return a.ASGName
	}
	return ""
}
