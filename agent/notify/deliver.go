package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// deliverer sends one claimed entry to its sink, retries it with backoff
// or dead-letters it, and acknowledges it in the outbox.
type deliverer struct {
	ob    Outbox
	sinks map[string]Sink
	o     Options
	log   *slog.Logger
	m     *metrics
}

// deliver sends one entry and records what came of it. direct marks an
// entry this agent enqueued while draining: it is not claimed, so a
// failure leaves it to the others rather than scheduling a retry.
func (dv *deliverer) deliver(ctx context.Context, dl Delivery, direct bool) {
	log := dv.log.With("sink", dl.Sink, "event", string(dl.Event), "delivery_id", dl.ID, "attempt", dl.Attempt)
	now := dv.o.Clock.Now()
	if now.Sub(dl.Time) > dv.o.MaxAge {
		dv.giveUp(ctx, log, dl, "max_age")
		return
	}
	sink, ok := dv.sinks[dl.Sink]
	var err error
	if !ok {
		// Another agent's configuration names it; retrying here lets one
		// that has it take the entry, and gives up if none does.
		err = fmt.Errorf("notify: sink %s is not configured on this agent", dl.Sink)
	} else {
		tctx, span := deliverySpan(ctx, dl)
		sctx, cancel := context.WithTimeout(tctx, sink.Timeout())
		err = sink.Send(sctx, dl)
		cancel()
		endDelivery(span, err)
	}
	if ctx.Err() != nil {
		// Stop's deadline: the entry stays pending for another agent.
		log.Info("notification cut short by stop; left to another agent")
		return
	}
	if err == nil {
		dv.store(ctx, log, "ack", func(c context.Context) error { return dv.ob.Ack(c, dl) })
		dv.m.count(dl, ResultDelivered)
		delay := dv.o.Clock.Now().Sub(dl.Time)
		dv.m.delay.Observe(max(delay, 0).Seconds())
		log.Debug("notification delivered", "delay", delay.Seconds())
		return
	}
	var se *SendError
	if errors.As(err, &se) && se.Permanent {
		dv.giveUp(ctx, log.With("err", err), dl, se.reason())
		return
	}
	if dl.Attempt >= dv.o.MaxAttempts {
		dv.giveUp(ctx, log.With("err", err), dl, "max_attempts")
		return
	}
	wait := dv.backoff(dl.Attempt)
	if se != nil && se.RetryAfter > wait {
		wait = min(se.RetryAfter, dv.o.BackoffMax)
	}
	at := dv.o.Clock.Now().Add(wait)
	if at.Sub(dl.Time) > dv.o.MaxAge {
		dv.giveUp(ctx, log.With("err", err), dl, "max_age")
		return
	}
	dv.m.count(dl, ResultRetry)
	log.Warn("notification failed; will retry", "err", err, "retry_in", wait.Seconds())
	if direct {
		return
	}
	dv.store(ctx, log, "schedule retry", func(c context.Context) error { return dv.ob.Retry(c, dl, at) })
}

// backoff is the delay after attempt (1-based): BackoffBase·2^(attempt-1)
// capped at BackoffMax, drawn uniformly from its upper half so agents that
// failed together do not retry together.
func (dv *deliverer) backoff(attempt int) time.Duration {
	b := dv.o.BackoffBase
	for i := 1; i < attempt && b < dv.o.BackoffMax; i++ {
		b *= 2
	}
	b = min(b, dv.o.BackoffMax)
	return b/2 + time.Duration(dv.o.Rand()*float64(b/2))
}

func (dv *deliverer) giveUp(ctx context.Context, log *slog.Logger, dl Delivery, reason string) {
	dv.store(ctx, log, "dead-letter", func(c context.Context) error { return dv.ob.Dead(c, dl, reason) })
	dv.m.count(dl, ResultDead)
	log.Error("notification given up", "reason", reason)
}

// store runs one outbox call with its own bound.
func (dv *deliverer) store(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) {
	c, cancel := context.WithTimeout(ctx, dv.o.StoreTimeout)
	defer cancel()
	if err := f(c); err != nil {
		log.Warn("notification outbox: "+what, "err", err)
	}
}
