package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
)

// Source names accepted in Config.Sources.
const (
	SourceSignal = "signal" // SIGTERM/SIGINT, handled by the agent itself
	SourceIMDS   = "imds"   // instance metadata: target-lifecycle-state and spot/instance-action
	SourceSQS    = "sqs"    // ASG lifecycle notifications on an SQS queue
	sourceSpot   = "spot"   // Trigger.Source for spot interruption notices (found by the imds source)
	// sourceHandoff labels errors reading the notices other agents handed
	// to this instance (sqs source with Deps.Handoff).
	sourceHandoff = "handoff"
)

// Events accepted in Config.DrainOn: the instance-metadata notices that
// start a drain (all found by the imds source).
const (
	DrainOnSpot      = "spot_interruption"        // spot/instance-action
	DrainOnRebalance = "rebalance_recommendation" // events/recommendations/rebalance
	DrainOnScheduled = "scheduled_event"          // events/maintenance/scheduled
)

// Values of Config.OnTimeout.
const (
	OnTimeoutContinue = "continue"
	OnTimeoutAbandon  = "abandon"
)

// Results accepted by CompleteLifecycleAction.
const (
	ResultContinue = "CONTINUE"
	ResultAbandon  = "ABANDON"
)

// Limits of the EC2 Auto Scaling API that the configuration is checked against.
const (
	// MaxGlobalTimeout is the longest an instance can stay in a wait state,
	// whatever the heartbeats.
	MaxGlobalTimeout = 48 * time.Hour
	// minHookHeartbeatTimeout and maxHookHeartbeatTimeout bound a hook's
	// HeartbeatTimeout (30 to 7200 seconds).
	minHookHeartbeatTimeout = 30 * time.Second
	maxHookHeartbeatTimeout = 7200 * time.Second
)

// Config is the lifecycle package's part of the `lifecycle:` section of the
// agent configuration (README "Configuration"); the drain's keys in the
// same section (drain_timeout, queued) are drain.Config's. The zero value of
// a duration means "not set"; DefaultConfig gives the documented defaults.
type Config struct {
	// Sources lists the trigger sources: any of signal, imds, sqs. signal is
	// always active (the agent handles it); default [signal].
	Sources []string `yaml:"sources"`
	// QueueURL is the SQS queue receiving ASG lifecycle notifications
	// (required by the sqs source). The queue may be shared by the fleet.
	QueueURL string `yaml:"queue_url"`
	// HookName is the lifecycle hook to complete when the imds source sees
	// Terminated (IMDS does not tell which hook); required by the imds source.
	// With the sqs source, when set, notifications of other hooks are left alone.
	HookName string `yaml:"hook_name"`
	// ASGName is the Auto Scaling group of this instance; empty = looked up
	// with DescribeAutoScalingInstances.
	ASGName string `yaml:"asg_name"`
	// HookHeartbeatTimeout is the hook's HeartbeatTimeout when known (0 =
	// unknown). It lets Validate check heartbeat_interval, the agent check
	// drain_timeout against GlobalTimeout, and Heartbeat stop at the
	// action's global timeout.
	HookHeartbeatTimeout time.Duration `yaml:"hook_heartbeat_timeout"`
	// HeartbeatInterval is the period of RecordLifecycleActionHeartbeat;
	// default 30s. Must be below half of HookHeartbeatTimeout.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// OnTimeout is the completion result when the drain hits its deadline:
	// continue (default, CONTINUE) or abandon (ABANDON).
	OnTimeout string `yaml:"on_timeout"`
	// IMDSPollInterval is the period of the imds source's polls; default 5s.
	IMDSPollInterval time.Duration `yaml:"imds_poll_interval"`
	// LaunchHookName is the EC2_INSTANCE_LAUNCHING hook that
	// Actor.LaunchGate completes once the agent is ready; empty = none.
	LaunchHookName string `yaml:"launch_hook_name"`
	// LaunchTimeout bounds the wait for readiness: not ready by then, the
	// launch action is completed with ABANDON (the instance is replaced).
	// Default 5m.
	LaunchTimeout time.Duration `yaml:"launch_timeout"`
	// DrainOn lists the instance-metadata notices that start a drain:
	// spot_interruption, rebalance_recommendation, scheduled_event; default
	// [spot_interruption]. Empty = none of them. They need the imds source.
	DrainOn []string `yaml:"drain_on"`
	// ScheduledEventLead is how long before a scheduled maintenance event's
	// NotBefore its drain starts; default 15m, 0 = at NotBefore.
	ScheduledEventLead time.Duration `yaml:"scheduled_event_lead"`
}

// DefaultConfig returns the documented defaults of the lifecycle section.
func DefaultConfig() Config {
	return Config{
		Sources:            []string{SourceSignal},
		HeartbeatInterval:  30 * time.Second,
		OnTimeout:          OnTimeoutContinue,
		IMDSPollInterval:   5 * time.Second,
		LaunchTimeout:      5 * time.Minute,
		DrainOn:            []string{DrainOnSpot},
		ScheduledEventLead: 15 * time.Minute,
	}
}

// GlobalTimeout is the longest a lifecycle action can last whatever the
// heartbeats: min(48h, 100 × the hook's heartbeat timeout), or 48h when the
// heartbeat timeout is unknown (0).
func GlobalTimeout(hookHeartbeatTimeout time.Duration) time.Duration {
	if hookHeartbeatTimeout <= 0 {
		return MaxGlobalTimeout
	}
	return min(MaxGlobalTimeout, 100*hookHeartbeatTimeout)
}

// Has reports whether source s is configured (signal always is).
func (c Config) Has(s string) bool {
	if s == SourceSignal {
		return true
	}
	for _, v := range c.Sources {
		if v == s {
			return true
		}
	}
	return false
}

// Drains reports whether event (a DrainOn value) is configured to start a
// drain.
func (c Config) Drains(event string) bool { return slices.Contains(c.DrainOn, event) }

// CompletionResult maps the drain outcome to the CompleteLifecycleAction
// result: ABANDON only when on_timeout is abandon and the drain hit its
// deadline, CONTINUE otherwise.
func (c Config) CompletionResult(hitDeadline bool) string {
	if hitDeadline && c.OnTimeout == OnTimeoutAbandon {
		return ResultAbandon
	}
	return ResultContinue
}

// Validate reports every problem at once (errors.Join), each a
// *configerr.Error whose key is relative to the lifecycle section.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(key, format, args...))
	}

	seen := map[string]bool{}
	for i, s := range c.Sources {
		switch s {
		case SourceSignal, SourceIMDS, SourceSQS:
		default:
			bad(fmt.Sprintf("sources[%d]", i), "unknown source %q (want signal, imds or sqs)", s)
		}
		if seen[s] {
			bad(fmt.Sprintf("sources[%d]", i), "duplicate source %q", s)
		}
		seen[s] = true
	}
	if c.Has(SourceIMDS) && c.HookName == "" {
		bad("hook_name", "required by the imds source (IMDS does not say which hook is waiting)")
	}
	if c.Has(SourceSQS) && c.QueueURL == "" {
		bad("queue_url", "required by the sqs source")
	}

	if c.HookHeartbeatTimeout != 0 &&
		(c.HookHeartbeatTimeout < minHookHeartbeatTimeout || c.HookHeartbeatTimeout > maxHookHeartbeatTimeout) {
		bad("hook_heartbeat_timeout", "must be between %s and %s (the Auto Scaling limits), got %s",
			minHookHeartbeatTimeout, maxHookHeartbeatTimeout, c.HookHeartbeatTimeout)
	}
	switch {
	case c.HeartbeatInterval <= 0:
		bad("heartbeat_interval", "must be positive, got %s", c.HeartbeatInterval)
	case c.HookHeartbeatTimeout > 0 && c.HeartbeatInterval >= c.HookHeartbeatTimeout/2:
		bad("heartbeat_interval", "must be below half of hook_heartbeat_timeout (%s), got %s",
			c.HookHeartbeatTimeout, c.HeartbeatInterval)
	}
	switch c.OnTimeout {
	case OnTimeoutContinue, OnTimeoutAbandon:
	default:
		bad("on_timeout", "must be continue or abandon, got %q", c.OnTimeout)
	}
	if c.IMDSPollInterval <= 0 {
		bad("imds_poll_interval", "must be positive, got %s", c.IMDSPollInterval)
	}

	switch {
	case c.LaunchTimeout <= 0:
		bad("launch_timeout", "must be positive, got %s", c.LaunchTimeout)
	case c.LaunchTimeout >= MaxGlobalTimeout:
		bad("launch_timeout", "must be below the lifecycle action's global timeout (at most %s), got %s", MaxGlobalTimeout, c.LaunchTimeout)
	}
	seenEvent := map[string]bool{}
	for i, e := range c.DrainOn {
		key := fmt.Sprintf("drain_on[%d]", i)
		switch e {
		case DrainOnSpot, DrainOnRebalance, DrainOnScheduled:
		default:
			bad(key, "unknown event %q (want %s, %s or %s)", e, DrainOnSpot, DrainOnRebalance, DrainOnScheduled)
			continue
		}
		if seenEvent[e] {
			bad(key, "duplicate event %q", e)
		}
		seenEvent[e] = true
		// spot_interruption is in the defaults, also of signal-only agents;
		// the others are asked for explicitly and would do nothing.
		if e != DrainOnSpot && !c.Has(SourceIMDS) {
			bad(key, "%s is read from instance metadata: add imds to sources", e)
		}
	}
	if c.ScheduledEventLead < 0 {
		bad("scheduled_event_lead", "must not be negative, got %s", c.ScheduledEventLead)
	}
	return errors.Join(errs...)
}

// CheckDrainTimeout reports whether a drain bounded by d ends before the
// lifecycle action's global timeout, past which heartbeats no longer help
// and Auto Scaling ends the action on its own. The error is a
// *configerr.Error for the key drain_timeout, relative to the lifecycle
// section that holds both.
func (c Config) CheckDrainTimeout(d time.Duration) error {
	if global := GlobalTimeout(c.HookHeartbeatTimeout); d >= global {
		return configerr.Errorf("drain_timeout", "must be below the lifecycle action's global timeout (%s = min(48h, 100 × hook_heartbeat_timeout)), got %s",
			global, d)
	}
	return nil
}
