# Container image of autodiag: the static binary alone on distroless, as
# distroless's non-root user (65532). Built by the release (dockers_v2 in
# .goreleaser.yaml), which puts each platform's binary at
# $TARGETPLATFORM/autodiag in the build context.
#
# The admin HTTP server listens on 127.0.0.1:9464 (the embedded default), so
# inside a pod or task it is reachable only from containers sharing the
# network namespace. To publish it, say so:
#   docker run -e AUTODIAG_ADMIN_ADDR=0.0.0.0:9464 -p 127.0.0.1:9464:9464 ...
# A config file: mount it and pass --config, or set AUTODIAG_CONFIG.
FROM gcr.io/distroless/static-debian12:nonroot
ARG TARGETPLATFORM
COPY $TARGETPLATFORM/autodiag /autodiag
USER 65532:65532
ENTRYPOINT ["/autodiag"]
CMD ["run"]
