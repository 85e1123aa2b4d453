# Container image of autodiag: the static binary alone on distroless, as
# distroless's non-root user (65532). Built by the release (dockers_v2 in
# .goreleaser.yaml), which puts each platform's binary at
# $TARGETPLATFORM/autodiag in the build context.
#
# The admin HTTP server listens on 127.0.0.1:9464 (the embedded default), so
# inside a pod or task it is reachable only from containers sharing the
# network namespace. It starts tasks and drains, so listening beyond
# loopback needs admin_auth in a mounted config (the agent refuses to start
# without it), with the secret in the environment:
#   admin_addr: 0.0.0.0:9464
#   admin_auth: {bearer_token_env: AUTODIAG_ADMIN_TOKEN}
#   docker run -v ./config.yaml:/config.yaml:ro -e AUTODIAG_CONFIG=/config.yaml
#     -e AUTODIAG_ADMIN_TOKEN -p 127.0.0.1:9464:9464 ...
# GET /healthz and /readyz stay open for probes.
FROM gcr.io/distroless/static-debian12:nonroot
ARG TARGETPLATFORM
COPY $TARGETPLATFORM/autodiag /autodiag
USER 65532:65532
ENTRYPOINT ["/autodiag"]
CMD ["run"]
