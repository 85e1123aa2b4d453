package open

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/state"
)

// StandaloneListener opens the standalone alert listener (`autodiag intake`) for cfg:
// the alert handler with no workers, sending tasks onto the fleet's SQS
// queue; see listener.Open.
func StandaloneListener(ctx context.Context, cfg config.Config, o Options, getenv func(string) (string, bool)) (*listener.Standalone, error) {
	connect := func() (listener.SQSBatchAPI, error) {
		awsCfg, err := AWS(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return sqs.NewFromConfig(awsCfg), nil
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return listener.Open(cfg, connect, log, getenv, func(reg prometheus.Registerer) (listener.Stores, error) {
		return intakeStores(ctx, cfg, reg, log)
	})
}

// intakeConns are the standalone intake's connections to Redis: a
// resolution's calls and a Slack button's, a few at a time.
const intakeConns = 8

// intakeStores are the fleet's stores a standalone intake records into
// when Redis is configured: the resolutions of alerts (resolved_at on
// their reports, the metrics on reg) and the Slack buttons' verdicts.
func intakeStores(ctx context.Context, cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (listener.Stores, error) {
	rcfg := cfg.Redis
	if rcfg.URL == "" && rcfg.URLSecret == "" && len(rcfg.Addrs) == 0 {
		return listener.Stores{}, nil
	}
	if rcfg.URLSecret != "" {
		awsCfg, err := AWS(ctx, cfg)
		if err != nil {
			return listener.Stores{}, err
		}
		if rcfg.URL, err = RedisURLFromSecret(ctx, rcfg.URLSecret, awsCfg); err != nil {
			return listener.Stores{}, err
		}
		rcfg.URLSecret = ""
	}
	rc, err := RedisClient(rcfg, intakeConns)
	if err != nil || rc == nil {
		return listener.Stores{}, err
	}
	store := state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards})
	diagnostics := make([]string, 0, len(cfg.Diagnostics))
	for _, d := range cfg.Diagnostics {
		diagnostics = append(diagnostics, d.Name)
	}
	rec, err := resolution.NewRecorder(resolution.NewRedis(rc, cfg.Redis.Prefix), store, diagnostics, nil, cfg.Redis.Timeout,
		log.With("component", "resolution"), reg)
	if err != nil {
		_ = rc.Close()
		return listener.Stores{}, fmt.Errorf("intake: resolution: %w", err)
	}
	// The resolved event goes to the fleet's outbox, as the agent's intake
	// sends it; the agents deliver it.
	ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix, ClaimIdle: cfg.NotifyClaimIdle, MaxLen: int64(cfg.NotifyOutboxMax)})
	resolved, err := hooks.OutboxResolved(cfg, ob, "intake", log)
	if err != nil {
		_ = rc.Close()
		return listener.Stores{}, fmt.Errorf("intake: %w", err)
	}
	if resolved != nil {
		rec.Notify(resolved)
	}
	return listener.Stores{
		Resolved: func(source, eventID string) { rec.Resolved(context.WithoutCancel(ctx), source, eventID) },
		Feedback: feedback.NewRedis(rc, cfg.Redis.Prefix, 0), Tasks: store,
		Close: func() { _ = rc.Close() }}, nil
}
