# syntax=docker/dockerfile:1
#
# tock images: a static, non-root binary on distroless.
#
#   docker build -t tock .                          # the tock binary (the default target)
#   docker build --target worker -t tock-worker .   # the example worker, examples/worker
#
# docker-compose.yml builds both. The binaries are static (CGO_ENABLED=0): the
# final images hold them, CA certificates and time zone data, and nothing else (no
# shell); they run as the distroless nonroot user, uid 65532.

# Keep in step with the go directive of go.mod (cmd/tock's compose test checks it).
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# The image sets GOTOOLCHAIN=local; auto fetches the patch release go.mod asks for when
# the image's is older.
ENV CGO_ENABLED=0 GOTOOLCHAIN=auto
# Modules first, in their own layer: they change less often than the code.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .

FROM build AS build-tock
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/tock ./cmd/tock

FROM build AS build-worker
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/worker ./examples/worker

FROM gcr.io/distroless/static-debian12:nonroot AS worker
COPY --from=build-worker /out/worker /worker
USER 65532:65532
ENTRYPOINT ["/worker"]

# Last, so that a build without --target makes the tock image.
FROM gcr.io/distroless/static-debian12:nonroot AS tock
COPY --from=build-tock /out/tock /tock
USER 65532:65532
# The HTTP API (tock server --http :8080).
EXPOSE 8080
ENTRYPOINT ["/tock"]
CMD ["--help"]
