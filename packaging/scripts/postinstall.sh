#!/bin/sh
# After the package's files are in place (deb postinst, rpm %post): create
# the system user the unit runs as, let it read the config, and make systemd
# see the unit. The agent is neither enabled nor started: the operator does
# that after editing /etc/autodiag/config.yaml. An upgrade does not restart a
# running agent either, since a restart is a drain that can take
# lifecycle.drain_timeout; `systemctl restart autodiag` when convenient.
set -e

# A fresh install: deb "configure" with no previously configured version,
# rpm's count of installed instances 1.
fresh=0
case "$1" in
configure) [ -n "$2" ] || fresh=1 ;;
1) fresh=1 ;;
esac

if ! getent passwd autodiag >/dev/null; then
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	useradd --system --user-group --no-create-home --home-dir /nonexistent \
		--shell "$nologin" --comment "autodiag diagnostic agent" autodiag
fi

# The agent reads its config as autodiag and nobody else needs to (a
# redis.url may carry a password). The package says root:autodiag 0640, but
# on a fresh install the group did not exist when the file was unpacked.
# Only then: on an upgrade an edited config keeps the owner and mode the
# operator gave it.
if [ "$fresh" = 1 ]; then
	chown root:autodiag /etc/autodiag/config.yaml
	chmod 0640 /etc/autodiag/config.yaml
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
