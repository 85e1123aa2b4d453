package hooks

import (
	"context"
	"fmt"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
)

// wireResults builds what happens to a result: the redactor (its metric
// on the agent's registry) and, with sinks configured, the notification
// dispatcher over the outbox (Deps.Outbox, else in memory).
func (b builder) wireResults(o Options) error {
	h := b.h
	red, err := redact.New(o.Config.Results.Redact.Effective(), o.Registry)
	if err != nil {
		return fmt.Errorf("hooks: results.redact: %w", err)
	}
	// The agent's own credentials (and redact.values_env) are redacted by
	// value, read through the same lookup as the sinks, so a refreshed
	// secret counts from its refresh on.
	red.SetKnown(o.Config.KnownValues(o.LookupEnv))
	h.redactor = red
	if err := b.wireUpload(o); err != nil {
		return err
	}
	if len(o.Config.Notify) == 0 {
		return nil
	}
	ob := o.Outbox
	if ob == nil {
		ob = notify.NewMemoryOutbox(notify.MemoryOptions{ClaimIdle: o.Config.NotifyClaimIdle, MaxLen: o.Config.NotifyOutboxMax})
	}
	// Slack threads live beside the outbox: in Redis when it is there, so
	// any agent replies under an alert's first message.
	sinks, err := notify.NewSinksWith(o.Config.Notify, notify.SinkDeps{Getenv: o.LookupEnv, Threads: notify.ThreadsFor(ob, o.Clock), Self: o.Config.AdminAddr})
	if err != nil {
		return fmt.Errorf("hooks: notify: %w", err)
	}
	disp, err := notify.NewDispatcher(ob, sinks, notify.Options{InstanceID: o.InstanceID, MaxAge: o.Config.NotifyMaxAge,
		StoreTimeout: o.Config.Redis.Timeout, Clock: o.Clock, Logger: o.Logger, Registerer: o.Registry})
	if err != nil {
		return fmt.Errorf("hooks: notify: %w", err)
	}
	h.notifier = &notifier{d: disp, base: context.WithoutCancel(o.Base), timeout: o.Config.Redis.Timeout, clock: o.Clock, log: o.Logger.With("component", "notify")}
	return nil
}
