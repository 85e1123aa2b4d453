#!/bin/sh
# Before the package's files go (deb prerm, rpm %preun). On removal, not on
# upgrade: stop the agent (SIGTERM, a drain: received work finishes) and
# disable the unit, so nothing is left to start a deleted binary.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now autodiag.service || true
	fi
	;;
esac
