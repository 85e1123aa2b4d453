package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The states the agent reports to systemd (Type=notify).
const (
	sdReady    = daemon.SdNotifyReady
	sdStopping = daemon.SdNotifyStopping
	sdWatchdog = daemon.SdNotifyWatchdog
)

// sdNotify tells systemd about the agent's state; without NOTIFY_SOCKET
// (not run by systemd) it does nothing.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("notifying the service manager failed", "state", state, "err", err)
	}
}

// watchdogInterval is half the unit's WatchdogSec (systemd's advice), or 0
// when the unit sets none (or the agent is not run by systemd).
func watchdogInterval() time.Duration {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil || d <= 0 {
		return 0
	}
	return d / 2
}

// runWatchdog sends WATCHDOG=1 every interval while check passes, until ctx
// ends. A failing check sends nothing, so systemd restarts an agent whose
// admin listener no longer answers once WatchdogSec passes; each failure is
// logged.
func runWatchdog(ctx context.Context, interval time.Duration, check func(context.Context) error, notify func(string), log *slog.Logger) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval/2)
		err := check(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("watchdog: the admin listener does not answer; not pinging systemd", "err", err)
			continue
		}
		notify(sdWatchdog)
	}
}

// healthzCheck asks the agent's own admin listener at addr for GET
// /healthz, through the loopback when it listens on every address: the
// watchdog proves that the agent still serves, not only that a goroutine
// runs.
func healthzCheck(addr string) func(context.Context) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	client := &http.Client{}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthz answered %s", resp.Status)
		}
		return nil
	}
}
