package agent

import (
	"context"

	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/lifecycle"
)

// newSupervisor builds the drain supervisor over this agent's parts.
func (a *Agent) newSupervisor(watcher *lifecycle.Watcher, actor *lifecycle.Actor) *supervisor.Supervisor {
	o := supervisor.Options{Lifecycle: a.cfg.Lifecycle, Drain: a.drain, Store: a.d.Store,
		StoreTimeout: a.cfg.Redis.Timeout, Clock: a.d.Clock, Logger: a.log,
		Gauges:   supervisor.Gauges{DrainState: a.m.drainState, DrainDuration: a.m.drainDuration, DrainDeadline: a.m.drainDeadline},
		Presence: drainedPresence{a.presence}, Outcomes: a.worker.Outcomes, InstanceID: a.d.InstanceID,
		StopIntake: a.endIntake, Hooks: a.hooks}
	if a.publisher != nil {
		o.CloudWatch = a.publisher
	}
	// A nil pointer in an interface is not nil: set them only when present.
	if watcher != nil {
		o.Watcher = watcher
	}
	if actor != nil {
		o.Actor = actor
	}
	return supervisor.New(o)
}

// drainedPresence marks the instance record drained at the drain's end.
type drainedPresence struct{ p *presence }

func (d drainedPresence) Drained(ctx context.Context) { d.p.put(ctx, d.p.ttl()) }
