package appconfig

import (
	"context"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/z5labs/humus"
)

// BuildTelemetry is an example App's telemetry, for humus.WithTelemetry:
// every log record, the controller's and client-go's included, is written
// as one JSON line to the Host's Stderr, where a pod's logs are collected.
// It records no traces and no metrics. An App that exports to a collector
// builds its providers here instead, with OpenTelemetry's OTLP exporters.
func BuildTelemetry(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
	exp, err := stdoutlog.New(stdoutlog.WithWriter(h.Stderr))
	if err != nil {
		return humus.Telemetry{}, err
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)))
	return humus.Telemetry{LoggerProvider: lp, Shutdown: lp.Shutdown}, nil
}
