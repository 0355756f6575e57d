# Multi-stage build: a static binary on a distroless base, running as non-root.
# Not run on our machines (no Docker engine there); see the README.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/baton ./cmd/server

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/baton /baton
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/baton"]
