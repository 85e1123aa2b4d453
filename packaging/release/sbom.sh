#!/bin/sh
# packaging/release/sbom.sh DOCUMENT GOOS GOARCH VERSION — GoReleaser's sboms
# step (.goreleaser.yaml), run in the dist directory: a CycloneDX JSON SBOM
# of the modules linked into the GOOS/GOARCH release binary, written to
# DOCUMENT.
#
# The modules are read from the binary's embedded Go build info (the
# linker's own list) by scripts/release, the program scripts/release-check
# builds its snapshot with, so a release and the checked snapshot write the
# same document. It is a module of its own, built here in seconds; no SBOM
# tool is installed.
set -eu
doc=$1 goos=$2 goarch=$3 version=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
# GoReleaser's binary directories carry the micro-architecture level
# (autodiag_linux_amd64_v1, autodiag_linux_arm64_v8.0); the snapshot's do not.
bin=
for d in autodiag_"$goos"_"$goarch" autodiag_"$goos"_"$goarch"_*; do
	if [ -f "$d/autodiag" ]; then
		bin=$d/autodiag
		break
	fi
done
[ -n "$bin" ] || {
	echo "sbom: no autodiag binary for $goos/$goarch in $PWD" >&2
	exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/autodiag-sbom.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
go build -C "$root/scripts/release" -o "$tmp/release" .
name=$(basename "$doc" .cdx.json)
"$tmp/release" sbom -o "$doc" -artifact "$name" -version "$version" "$bin"
