package supervisor

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
)

// Hooks are told of the drain's start and end: the notifications and the
// root-cause reports, which may not hold the drain past its deadline.
type Hooks interface {
	DrainStarted(p drain.Progress)
	// DrainEnded runs before the lifecycle completion; action is nil
	// when the drain had none.
	DrainEnded(ctx context.Context, p drain.Progress, action *lifecycle.Action, timedOut bool)
	CompletionFailed(p drain.Progress)
}

// Watcher is the part of *lifecycle.Watcher the supervisor uses: the
// instance's lifecycle state, a look for Terminating:Wait, and a watch for
// a notice during a drain that has no action yet.
type Watcher interface {
	State() (state string, known bool)
	TargetLifecycleState(ctx context.Context) (string, error)
	Probe(ctx context.Context) (*lifecycle.Action, error)
	Run(ctx context.Context, fire func(lifecycle.Trigger)) error
}

// Actor is the part of *lifecycle.Actor the supervisor uses on the
// drain's lifecycle action.
type Actor interface {
	ResolveASG(ctx context.Context, act *lifecycle.Action) error
	Beat(ctx context.Context, act lifecycle.Action) error
	Heartbeat(ctx context.Context, act lifecycle.Action) error
	Complete(ctx context.Context, act lifecycle.Action, result string) error
}

var (
	_ Watcher = (*lifecycle.Watcher)(nil)
	_ Actor   = (*lifecycle.Actor)(nil)
)

// Publisher puts DrainSeconds until ctx ends (CloudWatch).
type Publisher interface {
	DrainSeconds(ctx context.Context, start time.Time, actionGroup func() string)
}

// InstanceRecord is the instance's presence record, marked drained at the
// drain's end.
type InstanceRecord interface {
	Drained(ctx context.Context)
}

// Gauges are the drain's metrics (autodiag_drain_state,
// autodiag_drain_duration_seconds, autodiag_drain_deadline_seconds).
type Gauges struct {
	DrainState    prometheus.Gauge
	DrainDuration prometheus.Gauge
	DrainDeadline prometheus.Gauge
}

// Options are what a Supervisor is built from.
type Options struct {
	Lifecycle lifecycle.Config
	Drain     *drain.Controller
	// Watcher and Actor are nil (untyped) without imds or sqs sources.
	Watcher      Watcher
	Actor        Actor
	Store        state.DrainStore
	StoreTimeout time.Duration // redis.timeout
	Clock        clock.Clock
	Logger       *slog.Logger
	Gauges       Gauges
	// CloudWatch is nil when off.
	CloudWatch Publisher
	Presence   InstanceRecord
	// Outcomes counts the tasks' outcomes for the "drained" log line.
	Outcomes   func() map[string]int64
	InstanceID string
	// StopIntake ends the receive loop at the first instant of a drain.
	StopIntake context.CancelFunc
	Hooks      Hooks
}

// New builds the drain supervisor; Run drives it.
func New(o Options) *Supervisor {
	s := &Supervisor{cfg: o.Lifecycle, drain: o.Drain, clock: o.Clock, log: o.Logger, m: o.Gauges, presence: o.Presence,
		outcomes: o.Outcomes, stopIntake: o.StopIntake, hooks: o.Hooks,
		actions: &actions{cfg: o.Lifecycle, watcher: o.Watcher, actor: o.Actor, drain: o.Drain, hooks: o.Hooks, log: o.Logger},
		records: &drainStore{store: o.Store, storeTimeout: o.StoreTimeout, instanceID: o.InstanceID, drain: o.Drain, log: o.Logger}}
	if o.CloudWatch != nil {
		s.cloudwatch = o.CloudWatch
	}
	return s
}
