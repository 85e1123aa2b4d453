#!/bin/sh
# After the package's files are gone (deb postrm, rpm %postun): make systemd
# forget the unit. The autodiag user stays, as Debian policy advises: files
# it owned may remain, and a reinstall reuses it.
set -e

case "$1" in
remove | purge | 0)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
