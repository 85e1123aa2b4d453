#!/usr/bin/env bash
# scripts/chaos.sh — runs the chaos scenarios (scripts/chaos) and prints
# their result table; exits 1 when any must-hold fails.
#
# It installs the pinned toxiproxy-server and amazon-ec2-metadata-mock the
# way scripts/test.sh installs its tools (built once per machine from the
# module proxy into the tools cache, linked into .tmp/bin); redis-server
# must be installed (test.sh says how). Everything it starts listens on
# loopback and is stopped when it ends. Not run by CI: a few minutes.
#
#   scripts/chaos.sh               # every scenario
#   scripts/chaos.sh -only R3,R10  # only these
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/.tmp/bin
mkdir -p "$bin"

TOXIPROXY_VERSION=v2.5.0
IMDS_MOCK_VERSION=v1.13.0 # as scripts/test.sh

log() { printf 'chaos.sh: %s\n' "$*" >&2; }

tools_cache=${AUTODIAG_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/autodiag-tools}
go_version=$(go env GOVERSION)
# install_tool NAME VERSION PACKAGE BUILT: as scripts/test.sh's, BUILT
# being the name go install gives the binary.
install_tool() {
	local name=$1 version=$2 pkg=$3 built=$4
	local key="$version $go_version"
	if [[ -x $bin/$name && $(cat "$bin/.$name.version" 2>/dev/null) == "$key" ]]; then
		return 0
	fi
	local dir=$tools_cache/$name-$version-$go_version
	mkdir -p "$tools_cache"
	(
		if command -v flock >/dev/null; then
			exec 9>"$tools_cache/.$name.lock"
			flock 9
		fi
		if [[ ! -x $dir/$name ]]; then
			log "building $name $version with $go_version into $dir"
			local partial
			partial=$(mktemp -d "$tools_cache/.partial.XXXXXX")
			GOBIN=$partial go install "$pkg@$version" || { rm -rf "$partial"; exit 1; }
			mkdir -p "$dir"
			mv -f "$partial/$built" "$dir/$name"
			rm -rf "$partial"
		fi
	)
	rm -f "$bin/$name"
	ln "$dir/$name" "$bin/$name" 2>/dev/null || cp -p "$dir/$name" "$bin/$name"
	echo "$key" >"$bin/.$name.version"
}
install_tool toxiproxy-server "$TOXIPROXY_VERSION" github.com/Shopify/toxiproxy/v2/cmd/server server
install_tool ec2-metadata-mock "$IMDS_MOCK_VERSION" github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock ec2-metadata-mock
command -v redis-server >/dev/null || { log "redis-server is missing (apt-get install -y redis-server)"; exit 2; }

go build -o "$bin/chaos" ./scripts/chaos
exec "$bin/chaos" -toxiproxy "$bin/toxiproxy-server" -imds-mock "$bin/ec2-metadata-mock" "$@"
