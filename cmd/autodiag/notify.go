package main

import (
	"log/slog"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The states the agent reports to systemd (Type=notify).
const (
	sdReady    = daemon.SdNotifyReady
	sdStopping = daemon.SdNotifyStopping
)

// sdNotify tells systemd about the agent's state; without NOTIFY_SOCKET
// (not run by systemd) it does nothing.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("notifying the service manager failed", "state", state, "err", err)
	}
}
