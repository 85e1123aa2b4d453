package hooks

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
)

// NewRedactor builds the one chokepoint every output passes, from
// results.redact, its metric on reg. The agent's own credentials (and
// redact.values_env) are redacted by value, read through lookupEnv (the
// sinks' lookup), so a refreshed secret counts from its refresh on.
func NewRedactor(cfg config.Config, lookupEnv func(string) (string, bool), reg prometheus.Registerer) (*redact.Redactor, error) {
	red, err := redact.New(cfg.Results.Redact.Effective(), reg)
	if err != nil {
		return nil, fmt.Errorf("hooks: results.redact: %w", err)
	}
	red.SetKnown(cfg.KnownValues(lookupEnv))
	return red, nil
}

// wireResults builds what happens to a result: the redactor
// (Options.Redactor, else NewRedactor) and, with sinks configured, the
// notification dispatcher over the outbox (Deps.Outbox, else in memory).
func (b builder) wireResults(o Options) error {
	h := b.h
	h.redactor = o.Redactor
	if h.redactor == nil {
		red, err := NewRedactor(o.Config, o.LookupEnv, o.Registry)
		if err != nil {
			return err
		}
		h.redactor = red
	}
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
