#!/bin/sh
# packaging/release/sign.sh SIGNATURE ARTIFACT IS_SNAPSHOT — GoReleaser's
# signs step (.goreleaser.yaml): an ASCII-armoured detached gpg signature of
# ARTIFACT (checksums.txt) into SIGNATURE.
#
# A release signs with the key the release job supplies: GPG_FINGERPRINT
# names it in the job's keyring (GNUPGHOME), GPG_PASSPHRASE_FILE holds its
# passphrase if it has one. A release without GPG_FINGERPRINT fails.
# A snapshot without it signs with a throwaway key made for this run, and
# writes that key's public half beside the signature
# (snapshot-signing-key.asc), so scripts/release-check verifies the path a
# release takes.
set -eu
sig=$1 artifact=$2 snapshot=$3

if [ -n "${GPG_FINGERPRINT:-}" ]; then
	if [ -n "${GPG_PASSPHRASE_FILE:-}" ]; then
		exec gpg --batch --yes --pinentry-mode loopback --passphrase-file "$GPG_PASSPHRASE_FILE" \
			--local-user "$GPG_FINGERPRINT" --armor --output "$sig" --detach-sign "$artifact"
	fi
	exec gpg --batch --yes --local-user "$GPG_FINGERPRINT" --armor --output "$sig" --detach-sign "$artifact"
fi
if [ "$snapshot" != true ]; then
	echo "sign: GPG_FINGERPRINT is not set: a release must be signed" >&2
	exit 1
fi

home=$(mktemp -d "${TMPDIR:-/tmp}/autodiag-sign.XXXXXX")
cleanup() {
	gpgconf --homedir "$home" --kill all 2>/dev/null || true
	rm -rf "$home"
}
trap cleanup EXIT INT TERM
export GNUPGHOME="$home"
gpg --batch --quiet --passphrase '' --quick-gen-key \
	"autodiag snapshot signing (throwaway) <snapshot@autodiag.invalid>" ed25519 sign 1d
gpg --batch --yes --armor --output "$sig" --detach-sign "$artifact"
gpg --batch --armor --export >"$(dirname "$sig")/snapshot-signing-key.asc"
echo "sign: snapshot signed with a throwaway key (snapshot-signing-key.asc)" >&2
