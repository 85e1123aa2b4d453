package hooks

import (
	"context"
	"log/slog"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
)

// notifier turns task outcomes and drain milestones into notify events.
// A nil *notifier (no sinks configured) does nothing. Each event is one
// outbox write bounded by redis.timeout; delivery happens on the
// dispatcher's workers, so nothing here waits for a sink.
type notifier struct {
	d *notify.Dispatcher
	// base is what the outbox writes and Stop derive their bounds from:
	// never cancelled, so an event is written mid-shutdown too.
	base    context.Context
	timeout time.Duration // of each outbox write (redis.timeout)
	clock   clock.Clock
	log     *slog.Logger
}

// Drain results the drain_* events carry besides a lifecycle completion
// result (CONTINUE, ABANDON).
const (
	drainResultDeadline         = "deadline"
	drainResultCompletionFailed = "completion_failed"
)

// writes are the outbox writes of a task's final record, when its outcome
// is an event type, for the store to make with the record (and only when
// it writes the record); the record's output is already redacted.
func (n *notifier) writes(rec state.TaskRecord) []state.Write {
	if n == nil {
		return nil
	}
	typ := notify.EventType(rec.Outcome)
	switch typ {
	case notify.EventSucceeded, notify.EventFailed, notify.EventTimedOut, notify.EventRateLimited, notify.EventDenied:
	default:
		return nil
	}
	rec.Status = state.StatusDone
	if rec.FinishedAt.IsZero() {
		rec.FinishedAt = n.clock.Now()
	}
	v := rec.View(tracing.Link)
	entries, err := n.d.Entries(notify.Event{Type: typ, Task: &v})
	if err != nil {
		n.log.Warn("notification not written to the outbox; it is lost", "event", string(typ), "task_id", rec.ID, "err", err)
		return nil
	}
	ob := n.d.Outbox()
	out := make([]state.Write, 0, len(entries))
	// The closures take the id, not rec: a closure holding rec would move
	// the whole record to the heap on every call, a task whose outcome is
	// no event included.
	id := rec.ID
	for _, e := range entries {
		w := state.Write{Apply: func(ctx context.Context) {
			if err := n.d.EnqueueEntries(ctx, []notify.Entry{e}); err != nil {
				n.log.Warn("notification not written to the outbox; it is lost",
					"event", string(e.Event), "sink", e.Sink, "task_id", id, "err", err)
			}
		}}
		if ob != nil {
			if a := ob.AddArgs(e); a != nil {
				w.Stream = a
				w.Done = func(id string) { n.d.Enqueued([]notify.Entry{e}, []string{id}) }
			}
		}
		out = append(out, w)
	}
	return out
}

// drainStarted stops the dispatcher claiming the fleet's work and
// enqueues drain_started, which this agent still delivers itself.
func (n *notifier) drainStarted(p drain.Progress) {
	if n == nil {
		return
	}
	n.d.Drain()
	n.enqueue(notify.Event{Type: notify.EventDrainStarted, Drain: drainOf(p, "")}, "source", p.Source)
}

// drainEnded enqueues drain_completed (or drain_failed when the deadline
// cut work short or the action is abandoned) and stops the dispatcher
// within what is left of the drain deadline, so that the lifecycle
// completion that follows is never late because of a sink. What is not
// delivered by then stays in the outbox for other agents. The wait ends
// early when stop ends (a fast exit).
func (n *notifier) drainEnded(stop context.Context, p drain.Progress, result string) {
	if n == nil {
		return
	}
	typ := notify.EventDrainCompleted
	if p.TimedOut || result == lifecycle.ResultAbandon {
		typ = notify.EventDrainFailed
		if result == "" {
			result = drainResultDeadline
		}
	}
	n.enqueue(notify.Event{Type: typ, Drain: drainOf(p, result)}, "source", p.Source)
	left := p.Deadline.Sub(n.clock.Now())
	if p.Deadline.IsZero() {
		left = 0
	}
	ctx, cancel := context.WithTimeout(stop, max(left, 0))
	defer cancel()
	if err := n.d.Stop(ctx); err != nil {
		n.log.Warn("notifications cut short by the drain deadline; the outbox keeps them for other agents", "err", err)
	}
}

// completionFailed enqueues drain_failed for a lifecycle completion that
// failed; the dispatcher has stopped, so other agents deliver it.
func (n *notifier) completionFailed(p drain.Progress) {
	if n == nil {
		return
	}
	n.enqueue(notify.Event{Type: notify.EventDrainFailed, Drain: drainOf(p, drainResultCompletionFailed)}, "source", p.Source)
}

// drainResult is the lifecycle completion result a drain ends with: the
// action's, or "" without one.
func drainResult(cfg lifecycle.Config, action *lifecycle.Action, timedOut bool) string {
	if action == nil {
		return ""
	}
	return cfg.CompletionResult(timedOut)
}

func drainOf(p drain.Progress, result string) *notify.Drain {
	d := &notify.Drain{Source: p.Source, Reason: p.Reason, StartedAt: p.StartedAt.UTC(), Deadline: p.Deadline.UTC(),
		Result: result, Released: p.Released, Cancelled: p.Cancelled, TimedOut: p.TimedOut}
	if !p.EndedAt.IsZero() {
		end := p.EndedAt.UTC()
		d.EndedAt = &end
	}
	return d
}

// enqueue writes ev to the outbox in one call bounded by redis.timeout.
// A failure is logged (the event is lost) and never holds the caller.
// Its context is detached from the caller's by design: an event is
// written mid-shutdown too.
//
//nolint:contextcheck // see above
func (n *notifier) enqueue(ev notify.Event, attrs ...any) {
	ctx, cancel := context.WithTimeout(n.base, n.timeout)
	defer cancel()
	if _, err := n.d.Enqueue(ctx, ev); err != nil {
		n.log.Warn("notification not written to the outbox; it is lost",
			append([]any{"event", string(ev.Type), "err", err}, attrs...)...)
	}
}
