#!/bin/sh
# packaging/release/sbom.sh DOCUMENT GOOS GOARCH — GoReleaser's sboms step
# (.goreleaser.yaml), run in the dist directory: a CycloneDX JSON SBOM of
# the modules linked into cmd/autodiag for GOOS/GOARCH, written to DOCUMENT.
#
# The generator is CycloneDX's cyclonedx-gomod, pinned below and built from
# the Go module proxy into the tools cache on first use (the cache the
# other tools of scripts/test.sh and scripts/release-check share).
set -eu
doc=$1 goos=$2 goarch=$3
version=v1.10.0
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${AUTODIAG_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autodiag-tools}/cyclonedx-gomod-$version
if [ ! -x "$cache/cyclonedx-gomod" ]; then
	echo "sbom: building cyclonedx-gomod $version into $cache" >&2
	mkdir -p "$cache"
	partial=$(mktemp -d "$cache/.partial.XXXXXX")
	GOBIN=$partial go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$version"
	mv -f "$partial/cyclonedx-gomod" "$cache/cyclonedx-gomod"
	rmdir "$partial"
fi
case $doc in /*) out=$doc ;; *) out=$PWD/$doc ;; esac
cd "$root"
# cyclonedx-gomod reads the main module's version with go-git, which cannot
# open a git worktree: there, it reads a shared clone of HEAD instead.
if [ "$(git rev-parse --git-dir)" != "$(git rev-parse --git-common-dir)" ]; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/autodiag-sbom.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT INT TERM
	git clone --quiet --no-checkout "$root" "$tmp/src"
	git -C "$tmp/src" checkout --quiet "$(git rev-parse HEAD)"
	cd "$tmp/src"
fi
GOOS=$goos GOARCH=$goarch CGO_ENABLED=0 "$cache/cyclonedx-gomod" app -json -licenses=false \
	-main cmd/autodiag -output "$out" .
