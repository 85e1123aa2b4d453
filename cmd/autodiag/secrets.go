package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
)

// secretCreds are the credentials a long-running command reads: the
// environment and, for *_secret keys, the secret store, refreshed every
// secrets_refresh and on SIGHUP while the command runs.
type secretCreds struct {
	// lookup reads an environment variable or a secret reference (the
	// store's Getenv over os.LookupEnv).
	lookup func(string) (string, bool)
	stop   func()
}

// openCredentials reads cfg's *_secret credentials at start (a failure
// ends the start, naming the reference) and refreshes them until stop.
// SIGHUP is taken even with no secret configured, so that a reload never
// kills the agent.
func openCredentials(ctx context.Context, cfg config.Config, log *slog.Logger) (*secretCreds, error) {
	store, err := open.Secrets(ctx, cfg, cfg.SecretRefs())
	if err != nil {
		return nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	rctx, cancel := context.WithCancel(ctx)
	reload := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-rctx.Done():
				return
			case <-hup:
				if store == nil {
					log.Info("SIGHUP: no *_secret credential to read again")
					continue
				}
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}()
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		if store != nil {
			store.Run(rctx, cfg.SecretsRefreshInterval(), reload, log.With("component", "secrets"))
		}
	}()
	if store != nil {
		log.Info("secrets read", "refs", len(store.Refs()), "refresh", cfg.SecretsRefreshInterval().Seconds())
	}
	return &secretCreds{
		lookup: store.Getenv(os.LookupEnv),
		stop: func() {
			signal.Stop(hup)
			cancel()
			<-done
			<-runDone
		},
	}, nil
}

// cliLookup is the lookup of a short CLI command: the environment and the
// secrets of refs read once.
func cliLookup(ctx context.Context, cfg config.Config, refs []string) (func(string) (string, bool), error) {
	store, err := open.Secrets(ctx, cfg, refs)
	if err != nil {
		return nil, err
	}
	return store.Getenv(os.LookupEnv), nil
}
