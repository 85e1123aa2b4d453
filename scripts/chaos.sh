#!/usr/bin/env bash
# scripts/chaos.sh — runs the chaos scenarios (scripts/chaos) and prints
# their result table; exits 1 when any must-hold fails.
#
# It installs the pinned toxiproxy-server the way scripts/test.sh installs
# its tools (built once per machine from the module proxy into the tools
# cache, linked into .tmp/bin); redis-server must be installed (test.sh
# says how). Everything it starts listens on loopback and is stopped when
# it ends. Not run by CI: about 5 minutes of real time.
#
#   scripts/chaos.sh               # every scenario
#   scripts/chaos.sh -only R3,R10  # only these
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/.tmp/bin
mkdir -p "$bin"

TOXIPROXY_VERSION=v2.5.0

tools_cache=${AUTODIAG_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/autodiag-tools}
go_version=$(go env GOVERSION)
name=toxiproxy-server
key="$TOXIPROXY_VERSION $go_version"
if [[ ! -x $bin/$name || $(cat "$bin/.$name.version" 2>/dev/null) != "$key" ]]; then
	dir=$tools_cache/$name-$TOXIPROXY_VERSION-$go_version
	mkdir -p "$tools_cache"
	(
		if command -v flock >/dev/null; then
			exec 9>"$tools_cache/.$name.lock"
			flock 9
		fi
		if [[ ! -x $dir/$name ]]; then
			echo "chaos.sh: building $name $TOXIPROXY_VERSION into $dir" >&2
			partial=$(mktemp -d "$tools_cache/.partial.XXXXXX")
			GOBIN=$partial go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" || { rm -rf "$partial"; exit 1; }
			mkdir -p "$dir"
			mv -f "$partial/server" "$dir/$name"
			rmdir "$partial"
		fi
	)
	rm -f "$bin/$name"
	ln "$dir/$name" "$bin/$name" 2>/dev/null || cp -p "$dir/$name" "$bin/$name"
	echo "$key" >"$bin/.$name.version"
fi
command -v redis-server >/dev/null || { echo "chaos.sh: redis-server is missing (apt-get install -y redis-server)" >&2; exit 2; }

go build -o "$bin/chaos" ./scripts/chaos
exec "$bin/chaos" -toxiproxy "$bin/$name" "$@"
