package lifecycle

import (
	"errors"
	"fmt"
	"time"
)

// Source names accepted in Config.Sources.
const (
	SourceSignal = "signal" // SIGTERM/SIGINT, handled by the agent itself
	SourceIMDS   = "imds"   // instance metadata: target-lifecycle-state and spot/instance-action
	SourceSQS    = "sqs"    // ASG lifecycle notifications on an SQS queue
	sourceSpot   = "spot"   // Trigger.Source for spot interruption notices (found by the imds source)
)

// Values of Config.OnTimeout and Config.Queued.
const (
	OnTimeoutContinue = "continue"
	OnTimeoutAbandon  = "abandon"
	QueuedFinish      = "finish"
	QueuedRelease     = "release"
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

// Config is the `lifecycle:` section of the agent configuration (see
// DESIGN.md). The zero value of a duration means "not set"; DefaultConfig
// gives the documented defaults.
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
	// unknown). It lets Validate check heartbeat_interval and drain_timeout,
	// and Heartbeat stop at the action's global timeout.
	HookHeartbeatTimeout time.Duration `yaml:"hook_heartbeat_timeout"`
	// HeartbeatInterval is the period of RecordLifecycleActionHeartbeat;
	// default 30s. Must be below half of HookHeartbeatTimeout.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// DrainTimeout bounds a drain; default 10m. Must stay below the lifecycle
	// action's global timeout.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// OnTimeout is the completion result when the drain hits its deadline:
	// continue (default, CONTINUE) or abandon (ABANDON).
	OnTimeout string `yaml:"on_timeout"`
	// Queued says what happens to received-but-unstarted work on drain:
	// finish (default) or release. Used by the drain package via the agent.
	Queued string `yaml:"queued"`
	// IMDSPollInterval is the period of the imds source's polls; default 5s.
	IMDSPollInterval time.Duration `yaml:"imds_poll_interval"`
}

// DefaultConfig returns the documented defaults of the lifecycle section.
func DefaultConfig() Config {
	return Config{
		Sources:           []string{SourceSignal},
		HeartbeatInterval: 30 * time.Second,
		DrainTimeout:      10 * time.Minute,
		OnTimeout:         OnTimeoutContinue,
		Queued:            QueuedFinish,
		IMDSPollInterval:  5 * time.Second,
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

// CompletionResult maps the drain outcome to the CompleteLifecycleAction
// result: ABANDON only when on_timeout is abandon and the drain hit its
// deadline, CONTINUE otherwise.
func (c Config) CompletionResult(hitDeadline bool) string {
	if hitDeadline && c.OnTimeout == OnTimeoutAbandon {
		return ResultAbandon
	}
	return ResultContinue
}

// Validate reports every problem at once (errors.Join); each message starts
// with the key path relative to the lifecycle section.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
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
	global := GlobalTimeout(c.HookHeartbeatTimeout)
	switch {
	case c.DrainTimeout <= 0:
		bad("drain_timeout", "must be positive, got %s", c.DrainTimeout)
	case c.DrainTimeout >= global:
		bad("drain_timeout", "must be below the lifecycle action's global timeout (%s = min(48h, 100 × hook_heartbeat_timeout)), got %s",
			global, c.DrainTimeout)
	}
	switch c.OnTimeout {
	case OnTimeoutContinue, OnTimeoutAbandon:
	default:
		bad("on_timeout", "must be continue or abandon, got %q", c.OnTimeout)
	}
	switch c.Queued {
	case QueuedFinish, QueuedRelease:
	default:
		bad("queued", "must be finish or release, got %q", c.Queued)
	}
	if c.IMDSPollInterval <= 0 {
		bad("imds_poll_interval", "must be positive, got %s", c.IMDSPollInterval)
	}
	return errors.Join(errs...)
}
