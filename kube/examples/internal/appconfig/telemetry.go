package appconfig

import (
	"context"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/z5labs/humus"
)

// BuildTelemetry is an example App's telemetry, for humus.WithTelemetry:
// every log record of severity INFO or above, the controller's and
// client-go's included, is written as one JSON line to the Host's Stderr,
// where a pod's logs are collected. client-go's debug records (klog's V(1)
// and up, down to request and response bodies) are left out. It records no
// traces and no metrics. An App that exports to a collector builds its
// providers here instead, with OpenTelemetry's OTLP exporters.
func BuildTelemetry(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
	exp, err := stdoutlog.New(stdoutlog.WithWriter(h.Stderr))
	if err != nil {
		return humus.Telemetry{}, err
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(MinSeverity(sdklog.NewSimpleProcessor(exp), log.SeverityInfo)))
	return humus.Telemetry{LoggerProvider: lp, Shutdown: lp.Shutdown}, nil
}

// MinSeverity returns a Processor that passes on to next only the records
// of severity min or above, and those of no severity. Its Enabled reports
// the same, so a logger that asks first (as the logr bridge client-go's
// records come through does) doesn't build the records it would drop.
func MinSeverity(next sdklog.Processor, min log.Severity) sdklog.Processor {
	return minSeverity{Processor: next, min: min}
}

type minSeverity struct {
	sdklog.Processor
	min log.Severity
}

func (p minSeverity) keep(s log.Severity) bool {
	return s == log.SeverityUndefined || s >= p.min
}

func (p minSeverity) OnEmit(ctx context.Context, r *sdklog.Record) error {
	if !p.keep(r.Severity()) {
		return nil
	}
	return p.Processor.OnEmit(ctx, r)
}

func (p minSeverity) Enabled(ctx context.Context, param sdklog.EnabledParameters) bool {
	return p.keep(param.Severity) && p.Processor.Enabled(ctx, param)
}
