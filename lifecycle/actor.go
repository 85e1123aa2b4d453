package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
)

// DefaultCompleteTimeout bounds Complete when the caller's context has no
// deadline of its own.
const DefaultCompleteTimeout = 2 * time.Minute

// Actor heartbeats and completes lifecycle actions. One Actor serves a
// drain; its Complete is idempotent per action.
type Actor struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics

	completeMu sync.Mutex        // serialises Complete calls
	completed  map[string]string // action key → completion result (CONTINUE/ABANDON/no_action)

	launchMu sync.Mutex        // serialises LaunchGate calls
	launched map[string]string // destination → launch result sent

	notices *noticeMessages

	mu        sync.Mutex
	asg       string        // resolved ASG name, cached
	beatEvery time.Duration // the interval Heartbeat settled on (0 before it ran)
	status    ActorStatus
	launch    LaunchStatus
}

// ActorStatus is what the agent shows in /v1/status drain.lifecycle.
type ActorStatus struct {
	Hook           string    `json:"hook"`
	Heartbeats     int       `json:"heartbeats"` // successful heartbeats
	LastHeartbeat  time.Time `json:"last_heartbeat,omitzero"`
	Completed      bool      `json:"completed"`
	Result         string    `json:"result,omitempty"` // CONTINUE | ABANDON as sent
	NoActiveAction bool      `json:"no_active_action,omitempty"`
}

// NewActor returns an Actor; Deps.AutoScaling must be set before Heartbeat
// or Complete is called with an action.
func NewActor(cfg Config, d Deps) *Actor {
	d = d.withDefaults()
	return &Actor{cfg: cfg, d: d, log: d.Logger.With("component", "lifecycle"), m: newMetrics(d.Registerer),
		completed: map[string]string{}, launched: map[string]string{}, asg: cfg.ASGName, notices: &noticeMessages{d: d}}
}

// Status returns a snapshot for status reporting.
func (a *Actor) Status() ActorStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// resolveASG asks DescribeAutoScalingInstances which group instanceID is in.
func resolveASG(ctx context.Context, api autoScalingAPI, instanceID string) (string, error) {
	if api == nil {
		return "", errors.New("no Auto Scaling client to resolve the group (set lifecycle.asg_name)")
	}
	out, err := api.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		return "", fmt.Errorf("describe auto scaling instance %s: %w", instanceID, err)
	}
	for _, in := range out.AutoScalingInstances {
		if aws.ToString(in.InstanceId) == instanceID && aws.ToString(in.AutoScalingGroupName) != "" {
			return aws.ToString(in.AutoScalingGroupName), nil
		}
	}
	return "", fmt.Errorf("instance %s is not in an Auto Scaling group", instanceID)
}

// ResolveASG fills act.ASGName when it is empty: from asg_name, else
// DescribeAutoScalingInstances (retried with backoff on throttling and 5xx
// until ctx ends). The answer is cached by the Actor.
func (a *Actor) ResolveASG(ctx context.Context, act *Action) error {
	if act.ASGName != "" {
		return nil
	}
	a.mu.Lock()
	cached := a.asg
	a.mu.Unlock()
	if cached != "" {
		act.ASGName = cached
		return nil
	}
	bo := newBackoff(500*time.Millisecond, 20*time.Second)
	for {
		name, err := resolveASG(ctx, a.d.AutoScaling, act.InstanceID)
		if err == nil {
			a.mu.Lock()
			a.asg = name
			a.mu.Unlock()
			act.ASGName = name
			return nil
		}
		if !isRetryable(err) {
			return fmt.Errorf("lifecycle: %w", err)
		}
		if serr := sleep(ctx, a.d.Clock, bo.NextBackOff()); serr != nil {
			return fmt.Errorf("lifecycle: %w (gave up: %w)", err, serr)
		}
	}
}

// globalDeadline is when the action ends whatever the heartbeats (zero =
// unknown start).
func globalDeadline(act Action, hookHeartbeatTimeout time.Duration) time.Time {
	if act.Started.IsZero() {
		return time.Time{}
	}
	return act.Started.Add(GlobalTimeout(hookHeartbeatTimeout))
}

// hookDescriber is optional: *autoscaling.Client has it, and with it the
// Actor learns the hook's heartbeat timeout when the configuration does not
// give it.
type hookDescriber interface {
	DescribeLifecycleHooks(ctx context.Context, params *autoscaling.DescribeLifecycleHooksInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

var _ hookDescriber = (*autoscaling.Client)(nil)

// hookHeartbeatTimeout is hook_heartbeat_timeout, else the hook's
// HeartbeatTimeout from DescribeLifecycleHooks (best effort, one call; 0 =
// unknown, e.g. without the IAM permission).
func (a *Actor) hookHeartbeatTimeout(ctx context.Context, act Action, log *slog.Logger) time.Duration {
	if a.cfg.HookHeartbeatTimeout > 0 {
		return a.cfg.HookHeartbeatTimeout
	}
	hd, ok := a.d.AutoScaling.(hookDescriber)
	if !ok {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := hd.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{
		AutoScalingGroupName: aws.String(act.ASGName), LifecycleHookNames: []string{act.HookName},
	})
	if err != nil {
		log.Info("could not learn the hook's heartbeat timeout; set lifecycle.hook_heartbeat_timeout", "err", err)
		return 0
	}
	for _, h := range out.LifecycleHooks {
		if aws.ToString(h.LifecycleHookName) == act.HookName && h.HeartbeatTimeout != nil {
			return time.Duration(*h.HeartbeatTimeout) * time.Second
		}
	}
	return 0
}

// Heartbeat sends RecordLifecycleActionHeartbeat at once and then every
// heartbeat_interval until ctx is done; the agent cancels ctx exactly when
// the drain ends. A failed heartbeat is retried with backoff until the next
// one is due; attempts are counted in lifecycle_heartbeats_total{result}.
// For an action announced on SQS it also keeps the notification invisible.
// It stops early (logged, nil) when Auto Scaling answers "No active
// Lifecycle Action found" (for an action known only from IMDS, only once
// that answer has held for NoActionSettle, see Complete) or when the action's global timeout
// (min(48h, 100 × hook_heartbeat_timeout) from Action.Started) is reached.
// When hook_heartbeat_timeout is not configured it asks DescribeLifecycleHooks
// once (best effort); an interval not below half of the hook's timeout is
// then shortened to a third of it, with a warning.
// It returns nil when ctx is cancelled.
func (a *Actor) Heartbeat(ctx context.Context, act Action) error {
	if a.d.AutoScaling == nil {
		return errors.New("lifecycle: heartbeat: no Auto Scaling client")
	}
	if err := a.ResolveASG(ctx, &act); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("lifecycle: heartbeat: %w", err)
	}
	a.mu.Lock()
	a.status.Hook = act.HookName
	a.mu.Unlock()
	log := a.log.With("instance_id", act.InstanceID, "asg", act.ASGName, "hook", act.HookName)
	interval := a.cfg.HeartbeatInterval
	if interval <= 0 {
		interval = DefaultConfig().HeartbeatInterval
	}
	hbt := a.hookHeartbeatTimeout(ctx, act, log)
	if hbt > 0 && interval >= hbt/2 {
		// Config validation could not see this: beating this slowly would let
		// the action expire. Keep it alive, loudly.
		log.Warn("heartbeat_interval is not below half of the hook's heartbeat timeout; heartbeating every third of it instead",
			"heartbeat_interval", interval, "hook_heartbeat_timeout", hbt, "used_interval", hbt/3)
		interval = hbt / 3
	}
	limit := globalDeadline(act, hbt)
	a.mu.Lock()
	a.beatEvery = interval
	a.mu.Unlock()

	sw := &settleWindow{act: act}
	next := a.d.Clock.Now()
	for {
		now := a.d.Clock.Now()
		if !limit.IsZero() && !now.Before(limit) {
			log.Warn("lifecycle action reached its global timeout; heartbeats cannot extend it further",
				"started", act.Started, "global_timeout", GlobalTimeout(hbt))
			return nil
		}
		next = next.Add(interval)
		a.notices.extendNotification(ctx, act, interval, log)
		err := a.beat(ctx, act, interval, next, sw, log)
		switch {
		case ctx.Err() != nil:
			return nil
		case isNoActiveAction(err) && sw.retry(a.d.Clock.Now()):
			log.Info("lifecycle action not visible to the API yet; heartbeats go on", "err", err)
		case isNoActiveAction(err):
			a.mu.Lock()
			a.status.NoActiveAction = true
			a.mu.Unlock()
			log.Warn("no active lifecycle action; heartbeats stop", "err", err)
			return nil
		case err != nil:
			log.Error("heartbeat failed until the next one was due", "err", err)
		}
		if sleep(ctx, a.d.Clock, next.Sub(a.d.Clock.Now())) != nil {
			return nil
		}
	}
}

// Beat sends one RecordLifecycleActionHeartbeat now, retrying retryable
// errors with backoff until ctx's deadline (one heartbeat_interval without
// one). The agent calls it when it resumes a drain after a restart: the
// previous process may have died long before its next heartbeat was due,
// and the resumed drain, with no work of its own left, ends (and stops
// Heartbeat) at once.
func (a *Actor) Beat(ctx context.Context, act Action) error {
	if a.d.AutoScaling == nil {
		return errors.New("lifecycle: heartbeat: no Auto Scaling client")
	}
	if err := a.ResolveASG(ctx, &act); err != nil {
		return fmt.Errorf("lifecycle: heartbeat: %w", err)
	}
	interval := a.cfg.HeartbeatInterval
	if interval <= 0 {
		interval = DefaultConfig().HeartbeatInterval
	}
	due, ok := ctx.Deadline()
	if !ok {
		due = a.d.Clock.Now().Add(interval)
	}
	return a.beat(ctx, act, interval, due, nil, a.log.With("instance_id", act.InstanceID, "asg", act.ASGName, "hook", act.HookName))
}

// beat sends one heartbeat, retrying retryable errors with backoff until
// due, and "no active action" while sw says it may not be visible yet.
func (a *Actor) beat(ctx context.Context, act Action, interval time.Duration, due time.Time, sw *settleWindow, log *slog.Logger) error {
	err := a.beatOnce(ctx, act, interval, due, sw, log)
	if err == nil {
		a.mu.Lock()
		a.status.Heartbeats++
		a.status.LastHeartbeat = a.d.Clock.Now()
		a.mu.Unlock()
	}
	return err
}

// beatOnce is beat without the drain's status bookkeeping (the launch gate
// keeps its own).
func (a *Actor) beatOnce(ctx context.Context, act Action, interval time.Duration, due time.Time, sw *settleWindow, log *slog.Logger) error {
	in := &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(act.ASGName),
		LifecycleHookName:    aws.String(act.HookName),
		InstanceId:           aws.String(act.InstanceID),
	}
	if act.Token != "" {
		in.LifecycleActionToken = aws.String(act.Token)
	}
	bo := newBackoff(max(interval/30, 100*time.Millisecond), max(interval/4, time.Second))
	for {
		_, err := a.d.AutoScaling.RecordLifecycleActionHeartbeat(ctx, in)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.m.heartbeats.WithLabelValues(metricResult(err)).Inc()
		if err == nil {
			return nil
		}
		settling := isNoActiveAction(err) && sw.retry(a.d.Clock.Now())
		if !settling && (isNoActiveAction(err) || !isRetryable(err)) {
			return fmt.Errorf("lifecycle: heartbeat %s: %w", act.InstanceID, err)
		}
		wait := bo.NextBackOff()
		if !a.d.Clock.Now().Add(wait).Before(due) {
			return fmt.Errorf("lifecycle: heartbeat %s: %w", act.InstanceID, err)
		}
		log.Info("heartbeat failed; retrying", "retry_in", wait, "err", err)
		if sleep(ctx, a.d.Clock, wait) != nil {
			return ctx.Err()
		}
	}
}

// Complete calls CompleteLifecycleAction until it succeeds once (result
// CONTINUE or ABANDON), on ctx (pass a detached, bounded context; one
// without a deadline is bounded by DefaultCompleteTimeout), retrying
// throttling, 5xx and transport errors with backoff. "No active Lifecycle
// Action found" counts as done (logged, result="no_action"), except for an
// action known only from IMDS (no token) answered within NoActionSettle of
// Action.Started: that answer is retried with backoff for up to
// NoActionSettle, since the API can lag instance metadata. While it
// retries, the action is kept alive: a heartbeat goes out whenever one is
// due (heartbeat_interval after the last), so a throttling storm longer
// than the hook's heartbeat timeout does not let the action lapse into its
// default result. Then, for an
// action announced on SQS, it deletes the notification (a failed delete is
// logged, not returned: the completion stands). Attempts are counted in
// lifecycle_completions_total{result}. Once an action is done, later calls
// for it return nil without calling Auto Scaling; after a failure a later
// call tries again.
func (a *Actor) Complete(ctx context.Context, act Action, result string) error {
	if result != ResultContinue && result != ResultAbandon {
		return fmt.Errorf("lifecycle: complete: result %q is neither %s nor %s", result, ResultContinue, ResultAbandon)
	}
	if a.d.AutoScaling == nil {
		return errors.New("lifecycle: complete: no Auto Scaling client")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCompleteTimeout)
		defer cancel()
	}
	a.completeMu.Lock()
	defer a.completeMu.Unlock()
	if err := a.ResolveASG(ctx, &act); err != nil {
		return fmt.Errorf("lifecycle: complete: %w", err)
	}
	key := act.key()
	if prev, ok := a.completed[key]; ok {
		a.log.Debug("lifecycle action already completed; nothing to do", "instance_id", act.InstanceID, "result", prev)
		return nil
	}
	log := a.log.With("instance_id", act.InstanceID, "asg", act.ASGName, "hook", act.HookName, "result", result)
	outcome, err := a.complete(ctx, act, result, &settleWindow{act: act},
		func(ctx context.Context) bool { return a.keepAliveWhileCompleting(ctx, act, log) }, log)
	if err != nil {
		return err
	}
	a.completed[key] = outcome
	a.mu.Lock()
	a.status.Hook = act.HookName
	a.status.Completed = true
	a.status.Result = result
	if outcome == "no_action" {
		a.status.NoActiveAction = true
	}
	a.mu.Unlock()
	a.notices.deleteNotification(ctx, act, log)
	a.notices.forgetHanded(ctx, act, log)
	return nil
}

// complete calls CompleteLifecycleAction until one call succeeds, retrying
// retryable errors with backoff and "no active action" while sw says it may
// not be visible yet; keepAlive (nil = none) runs before each retry and
// reports whether the action is gone. It returns the result sent, or
// "no_action" when the action had already ended.
func (a *Actor) complete(ctx context.Context, act Action, result string, sw *settleWindow, keepAlive func(context.Context) bool, log *slog.Logger) (string, error) {
	in := &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName:  aws.String(act.ASGName),
		LifecycleHookName:     aws.String(act.HookName),
		InstanceId:            aws.String(act.InstanceID),
		LifecycleActionResult: aws.String(result),
	}
	if act.Token != "" {
		in.LifecycleActionToken = aws.String(act.Token)
	}
	bo := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		_, err := a.d.AutoScaling.CompleteLifecycleAction(ctx, in)
		a.m.completions.WithLabelValues(metricResult(err)).Inc()
		if err == nil {
			log.Info("lifecycle action completed", "outcome", "ok")
			return result, nil
		}
		now := a.d.Clock.Now()
		settling := isNoActiveAction(err) && sw.retry(now)
		if isNoActiveAction(err) && !settling {
			log.Warn("no active lifecycle action; counted as completed", "outcome", "no_action", "err", err)
			return "no_action", nil
		}
		if !settling && (!isRetryable(err) || ctx.Err() != nil) {
			return "", fmt.Errorf("lifecycle: complete %s: %w", act.InstanceID, err)
		}
		if !settling && keepAlive != nil && keepAlive(ctx) {
			log.Warn("no active lifecycle action while completing; counted as completed", "outcome", "no_action")
			return "no_action", nil
		}
		wait := bo.NextBackOff()
		if settling {
			// The last try comes when the window closes, not after it.
			wait = min(wait, sw.until.Sub(now))
			log.Info("lifecycle action not visible to the API yet; retrying", "retry_in_seconds", wait.Seconds(),
				"settle_left_seconds", sw.until.Sub(now).Seconds())
		} else {
			log.Info("complete failed; retrying", "retry_in", wait, "err", err)
		}
		if serr := sleep(ctx, a.d.Clock, wait); serr != nil {
			return "", fmt.Errorf("lifecycle: complete %s: %w (gave up: %w)", act.InstanceID, err, serr)
		}
	}
}

// NoActionSettle is how long "No active Lifecycle Action found" is not
// believed for an action known only from instance metadata: IMDS can show
// the target state before the action is visible to the Auto Scaling API.
const NoActionSettle = 30 * time.Second

// settleWindow decides whether a "no active action" answer may be eventual
// consistency: for an action known from IMDS (no token) answered within
// NoActionSettle of Action.Started, calls are retried until NoActionSettle
// after that first answer. A nil window never retries.
type settleWindow struct {
	act   Action
	until time.Time // zero until the first "no active action" inside the window
}

// retry reports whether a "no active action" answer at now is to be retried.
func (s *settleWindow) retry(now time.Time) bool {
	if s == nil || s.act.Token != "" || s.act.Started.IsZero() {
		return false
	}
	if s.until.IsZero() {
		if now.Sub(s.act.Started) >= NoActionSettle {
			return false
		}
		s.until = now.Add(NoActionSettle)
	}
	return now.Before(s.until)
}

// keepAliveWhileCompleting sends one heartbeat (no retries: Complete's own
// loop comes back soon) when one is due, heartbeat_interval after the last
// successful one. It reports whether Auto Scaling answered that the action
// is gone.
func (a *Actor) keepAliveWhileCompleting(ctx context.Context, act Action, log *slog.Logger) (gone bool) {
	a.mu.Lock()
	every, last := a.beatEvery, a.status.LastHeartbeat
	a.mu.Unlock()
	if every <= 0 {
		every = a.cfg.HeartbeatInterval
	}
	if last.IsZero() {
		last = act.Started // no heartbeat got through: count from the action's start
	}
	if every <= 0 || last.IsZero() || a.d.Clock.Now().Before(last.Add(every)) {
		return false
	}
	err := a.beat(ctx, act, every, a.d.Clock.Now(), nil, log)
	if err == nil {
		log.Info("heartbeat sent while completion is retried")
	}
	return isNoActiveAction(err)
}
