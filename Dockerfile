# Container image of autodiag: the static binary on Debian slim, with the
# programs of the default catalog (uptime, free and ps from procps; df from
# coreutils; getent from libc-bin), as the non-root user 65532. Built by the
# release (dockers_v2 in .goreleaser.yaml), which puts each platform's binary
# at $TARGETPLATFORM/autodiag in the build context.
#
# The base is pinned by digest: the same Dockerfile builds on the same
# bytes. To move to a newer bookworm-slim, resolve the tag's index digest
# (multi-platform) and replace it here:
#   docker buildx imagetools inspect debian:bookworm-slim --format '{{json .Manifest.Digest}}'
#
# The admin HTTP server listens on 127.0.0.1:9464 (the embedded default):
# HEALTHCHECK below reaches it from inside the container. Listening beyond
# loopback (a scraper, a probe from outside) needs admin_auth in a mounted
# config, with the secret in the environment or a secret store; docs/install.md
# (Container) has a config that validates, and the stop grace each
# orchestrator needs for a drain.
FROM debian:bookworm-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251
ARG TARGETPLATFORM
RUN apt-get update && apt-get install -y --no-install-recommends procps && rm -rf /var/lib/apt/lists/* && groupadd --system --gid 65532 autodiag && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin autodiag
COPY $TARGETPLATFORM/autodiag /autodiag
USER 65532:65532
# SIGTERM drains: give the container a stop grace above drain_timeout
# (docker run --stop-timeout, ECS stopTimeout, Kubernetes
# terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# Liveness, not readiness: /healthz answers while the agent serves, draining
# included (ECS replaces a task that turns unhealthy; /readyz is 503 while
# draining or waiting for the launch hook and belongs in a readiness probe).
HEALTHCHECK --interval=30s --timeout=5s --start-period=2m --retries=3 CMD ["/autodiag", "healthcheck"]
ENTRYPOINT ["/autodiag"]
CMD ["run"]
