// Package humus runs an App: a set of Services that start together, stop
// together on SIGTERM or SIGINT, and reach the process only through a Host.
// A Service that others need until they have stopped, such as a webhook
// server a controller's writes call, is marked with StopAfter, and is
// stopped once they have.
//
// An App is an Init function. Main builds a Setup (the Host and the
// Telemetry), calls Init, serves every Service it returns, and exits with 0
// when every Service stopped cleanly after a signal, or 1 when Init failed or
// any Service failed. Nothing in humus keeps package-level mutable state or
// touches OpenTelemetry's globals.
//
// The nested module github.com/z5labs/humus/kube writes Kubernetes
// controllers as humus Services.
package humus

import (
	"context"
	"io"
	"io/fs"
	"net"
	"os"

	"go.opentelemetry.io/otel/log"
	lognoop "go.opentelemetry.io/otel/log/noop"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Service is one long-running part of an App, such as a controller or a
// probes server.
//
// Serve runs the Service until ctx is done, and then returns nil once it has
// finished; it returns an error when it fails on its own, which ends the App
// with exit code 1.
//
// Shutdown waits for Serve to return. If ctx is done first, it forces the
// Service to stop, waits for it, and returns an error wrapping ctx.Err().
type Service interface {
	Serve(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// Init builds an App's Services from its Setup. An error ends the App with
// exit code 1 before any Service starts.
type Init func(ctx context.Context, s *Setup) ([]Service, error)

// Setup is what an App's Init is handed: the Host it reaches the process
// through, and the Telemetry it records with.
type Setup struct {
	Host      Host
	Telemetry Telemetry
}

// Host is everything an App may take from the process and the machine:
// dialling, listening, files, the environment, signals and the standard
// error stream. OSHost returns the real one; humustest has a fake one.
// Library code reaches the process only through a Host.
type Host struct {
	// Dial connects to address on the named network, as net.Dialer's
	// DialContext does.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// Listen announces on the local network address, as
	// net.ListenConfig's Listen does.
	Listen func(ctx context.Context, network, address string) (net.Listener, error)

	// FS is the file system, rooted at "/". Names are slash-separated and
	// have no leading slash, as io/fs requires: the file
	// /var/run/secrets/kubernetes.io/serviceaccount/token is
	// "var/run/secrets/kubernetes.io/serviceaccount/token".
	FS fs.FS

	// LookupEnv returns the value of the environment variable key and
	// whether it is set, as os.LookupEnv does.
	LookupEnv func(key string) (string, bool)

	// Signals returns a channel that receives SIGTERM and SIGINT until ctx
	// is done.
	Signals func(ctx context.Context) <-chan os.Signal

	// Stderr is the process's standard error stream.
	Stderr io.Writer
}

// Telemetry is the OpenTelemetry an App records with. Every provider is
// passed on explicitly: humus never sets or reads OpenTelemetry's globals.
// A nil provider records nothing.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	LoggerProvider log.LoggerProvider
	Propagator     propagation.TextMapPropagator

	// Shutdown flushes and stops the providers. Main calls it last, after
	// every Service has stopped, with a context bounded by the grace
	// period. nil has nothing to flush.
	Shutdown func(ctx context.Context) error
}

// WithNoops returns t with a no-op provider in place of each nil one, and
// an empty composite propagator, which injects nothing, in place of a nil
// Propagator; Shutdown is left as it is. Run applies it to the Telemetry
// WithTelemetry builds. A library handed a Setup that Run didn't make, such
// as a test's, calls it so that it never falls back to OpenTelemetry's
// globals, as otelhttp and otelslog otherwise would.
func (t Telemetry) WithNoops() Telemetry {
	if t.TracerProvider == nil {
		t.TracerProvider = tracenoop.NewTracerProvider()
	}
	if t.MeterProvider == nil {
		t.MeterProvider = metricnoop.NewMeterProvider()
	}
	if t.LoggerProvider == nil {
		t.LoggerProvider = lognoop.NewLoggerProvider()
	}
	if t.Propagator == nil {
		t.Propagator = propagation.NewCompositeTextMapPropagator()
	}
	return t
}
