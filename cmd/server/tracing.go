package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// OpenTelemetry tracing is off unless the standard variables ask for it:
// OTEL_TRACES_EXPORTER (otlp, console; none turns it off) or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Everything
// else is the SDK's and the exporters' own reading of OTEL_*: the protocol
// (OTEL_EXPORTER_OTLP_PROTOCOL, http/protobuf by default), headers, timeouts,
// OTEL_SERVICE_NAME (baton by default), OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER (parent-based, always on by default) and OTEL_BSP_*.

// tracingWanted reports whether the environment (getenv) turns tracing on.
func tracingWanted(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// startTracing returns the tracer provider the OTEL_* variables of the
// process describe, or nil when they leave tracing off, and a function that
// flushes and stops it. Errors: an exporter or resource the variables
// describe that cannot be made (an unknown exporter or protocol, a bad
// OTEL_RESOURCE_ATTRIBUTES).
func startTracing(ctx context.Context) (*sdktrace.TracerProvider, func(), error) {
	if !tracingWanted(os.Getenv) {
		return nil, func() {}, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("baton")),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx) // flushes the spans still queued
	}
	return tp, stop, nil
}
