// Package packaging holds what the .deb and .rpm packages install beside the
// binary and the systemd unit (.goreleaser.yaml, nfpms): the config file, a
// unit drop-in that points ExecStart at the packaged binary, and the
// maintainer scripts. Its tests keep these in step with the files they derive
// from (deploy/config/example.yaml, deploy/systemd/autodiag.service); there
// is no Go code to import.
package packaging
