package appconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/config"
)

// The environment variables BuildTelemetry reads, with the Host's
// LookupEnv. The OTEL_ ones are OpenTelemetry's own
// (https://opentelemetry.io/docs/specs/otel/protocol/exporter/); only the
// http/protobuf protocol is spoken.
const (
	// EnvOTLPEndpoint is the base URL of an OTLP/HTTP receiver, such as
	// http://otel-collector:4318: traces go to its /v1/traces and logs to
	// its /v1/logs. Unset, with the two below unset too, nothing is
	// exported.
	EnvOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvOTLPTracesEndpoint and EnvOTLPLogsEndpoint are the full URLs of
	// one signal's receiver, in place of EnvOTLPEndpoint's.
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPLogsEndpoint   = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	// EnvOTLPHeaders are headers every export carries, as
	// key1=value1,key2=value2, such as an authorization.
	EnvOTLPHeaders = "OTEL_EXPORTER_OTLP_HEADERS"
	// EnvOTLPProtocol is http/protobuf, the default, or unset.
	EnvOTLPProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
	// EnvServiceName is the service.name of every span, record and metric.
	EnvServiceName = "OTEL_SERVICE_NAME"
	// EnvLogFormat is how log records are written to the Host's Stderr:
	// json (the default), one JSON object a line for a pod's log
	// collector, or console, one readable line a record for a terminal.
	EnvLogFormat = "LOG_FORMAT"
)

// MetricsPath is where ServeMetrics serves the metrics.
const MetricsPath = "/metrics"

// BuildTelemetry is an example App's telemetry, for humus.WithTelemetry.
// It reads the variables above from h with the humus config package:
//
//   - Metrics: always, into a Prometheus registry of its own (never
//     Prometheus' global one), through OpenTelemetry's Prometheus
//     exporter. Init serves them with ServeMetrics.
//   - Traces: over OTLP/HTTP when an endpoint is set, batched, with the
//     W3C trace context propagated to the API server. Otherwise none.
//   - Logs: every record of severity INFO or above to h.Stderr, as JSON or
//     as console lines (LOG_FORMAT), and over OTLP/HTTP too when an
//     endpoint is set.
//
// Nothing is exported and nothing fails without an endpoint: an exporter
// only connects when it sends. It returns one error naming every variable
// that is malformed.
func BuildTelemetry(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
	type settings struct {
		endpoint, traces, logs, headers, protocol, service, format string
	}
	env := func(name string) config.Source { return config.Env(h, name) }
	s, err := config.Struct(func(r *config.Resolver) settings {
		return settings{
			endpoint: r.GetOr(env(EnvOTLPEndpoint), ""),
			traces:   r.GetOr(env(EnvOTLPTracesEndpoint), ""),
			logs:     r.GetOr(env(EnvOTLPLogsEndpoint), ""),
			headers:  r.GetOr(env(EnvOTLPHeaders), ""),
			protocol: r.GetOr(env(EnvOTLPProtocol), "http/protobuf"),
			service:  r.GetOr(env(EnvServiceName), ""),
			format:   r.GetOr(env(EnvLogFormat), "json"),
		}
	}).Read(ctx)
	if err != nil {
		return humus.Telemetry{}, err
	}
	var errs []error
	if s.protocol != "http/protobuf" {
		errs = append(errs, fmt.Errorf("%s is %q: only http/protobuf is spoken", EnvOTLPProtocol, s.protocol))
	}
	if s.format != "json" && s.format != "console" {
		errs = append(errs, fmt.Errorf("%s is %q: it is json or console", EnvLogFormat, s.format))
	}
	headers, err := parseHeaders(s.headers)
	errs = append(errs, err)
	// The base endpoint is checked once, as it was set, when a signal
	// without an endpoint of its own uses it.
	if s.endpoint != "" && (s.traces == "" || s.logs == "") {
		errs = append(errs, checkURL(EnvOTLPEndpoint, s.endpoint))
	}
	tracesURL, err := signalURL(EnvOTLPTracesEndpoint, s.traces, s.endpoint, "v1/traces")
	errs = append(errs, err)
	logsURL, err := signalURL(EnvOTLPLogsEndpoint, s.logs, s.endpoint, "v1/logs")
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return humus.Telemetry{}, err
	}

	var attrs []attribute.KeyValue
	if s.service != "" {
		attrs = append(attrs, attribute.String("service.name", s.service))
	}
	res := resource.NewSchemaless(attrs...)

	var shutdowns []func(context.Context) error
	t := humus.Telemetry{}
	stop := func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, f(ctx))
		}
		return errors.Join(errs...)
	}

	// Metrics, in a registry of the App's own.
	reg := prometheus.NewRegistry()
	reader, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return humus.Telemetry{}, fmt.Errorf("the Prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	shutdowns = append(shutdowns, mp.Shutdown)
	t.MeterProvider = meterProvider{MeterProvider: mp, metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}

	// Traces, only with an endpoint.
	if tracesURL != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tracesURL), otlptracehttp.WithHeaders(headers))
		if err != nil {
			return humus.Telemetry{}, errors.Join(fmt.Errorf("the OTLP trace exporter: %w", err), stop(ctx))
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		shutdowns = append(shutdowns, tp.Shutdown)
		t.TracerProvider = tp
		t.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}

	// Logs: the Host's Stderr, and OTLP with an endpoint.
	var local sdklog.Exporter
	if s.format == "console" {
		local = NewConsoleExporter(h.Stderr)
	} else if local, err = stdoutlog.New(stdoutlog.WithWriter(h.Stderr)); err != nil {
		return humus.Telemetry{}, errors.Join(err, stop(ctx))
	}
	opts := []sdklog.LoggerProviderOption{
		sdklog.WithResource(res),
		sdklog.WithProcessor(MinSeverity(sdklog.NewSimpleProcessor(local), log.SeverityInfo)),
	}
	if logsURL != "" {
		exp, err := otlploghttp.New(ctx, otlploghttp.WithEndpointURL(logsURL), otlploghttp.WithHeaders(headers))
		if err != nil {
			return humus.Telemetry{}, errors.Join(fmt.Errorf("the OTLP log exporter: %w", err), stop(ctx))
		}
		opts = append(opts, sdklog.WithProcessor(MinSeverity(sdklog.NewBatchProcessor(exp), log.SeverityInfo)))
	}
	lp := sdklog.NewLoggerProvider(opts...)
	// The logs are flushed last, so that the other providers' errors are
	// still written.
	shutdowns = append(shutdowns, lp.Shutdown)
	t.LoggerProvider = lp
	t.Shutdown = stop
	return t, nil
}

// meterProvider is the MeterProvider BuildTelemetry returns: the SDK's,
// carrying the handler of the Prometheus registry it exports to, which
// MetricsHandler finds in the Setup Init is handed.
type meterProvider struct {
	*sdkmetric.MeterProvider
	metrics http.Handler
}

// signalURL is the URL one signal is exported to: its own variable's value
// (name), which must be an http or https URL, else base with path added
// (base is checked by the caller, as the user set it), else "" for none.
func signalURL(name, own, base, path string) (string, error) {
	if own != "" {
		return own, checkURL(name, own)
	}
	if base == "" {
		return "", nil
	}
	return strings.TrimSuffix(base, "/") + "/" + path, nil
}

// checkURL returns an error naming the variable name unless its value raw
// is an http or https URL with a host.
func checkURL(name, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s is %q: it is an http or https URL, such as http://otel-collector:4318", name, raw)
	}
	return nil
}

// parseHeaders parses OTEL_EXPORTER_OTLP_HEADERS: key=value pairs joined
// by commas, each value URL-encoded (as W3C Baggage's are).
func parseHeaders(s string) (map[string]string, error) {
	headers := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return headers, nil
	}
	var errs []error
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not key=value", EnvOTLPHeaders, pair))
			continue
		}
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: the value of %q: %w", EnvOTLPHeaders, k, err))
			continue
		}
		headers[k] = value
	}
	return headers, errors.Join(errs...)
}

// NewConsoleExporter returns a log exporter that writes each record to w
// as one readable line, for a terminal: its time in UTC as RFC 3339 to the
// millisecond (2026-12-02T03:04:05.600Z), its severity, its body, its
// attributes as key=value, and, for a record made in a span, trace_id and
// span_id as hex; a multi-line value, such as a joined error or a stack,
// continues on indented lines.
func NewConsoleExporter(w io.Writer) sdklog.Exporter {
	if w == nil {
		w = io.Discard
	}
	return &consoleExporter{w: w}
}

// consoleTime is RFC 3339 to the millisecond, as the console writes a
// record's time.
const consoleTime = "2006-01-02T15:04:05.000Z07:00"

type consoleExporter struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *consoleExporter) Export(_ context.Context, records []sdklog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, r := range records {
		b.Reset()
		ts := r.Timestamp()
		if ts.IsZero() {
			ts = r.ObservedTimestamp()
		}
		sev := r.SeverityText()
		if sev == "" {
			sev = r.Severity().String()
		}
		fmt.Fprintf(&b, "%s %-5s %s", ts.UTC().Format(consoleTime), sev, r.Body().AsString())
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			v := kv.Value.Emit()
			if strings.ContainsAny(v, " \"") && !strings.Contains(v, "\n") {
				v = fmt.Sprintf("%q", v)
			}
			b.WriteString(" " + string(kv.Key) + "=" + v)
			return true
		})
		if r.TraceID().IsValid() {
			b.WriteString(" trace_id=" + r.TraceID().String() + " span_id=" + r.SpanID().String())
		}
		line := strings.ReplaceAll(strings.TrimRight(b.String(), "\n"), "\n", "\n    ")
		if _, err := io.WriteString(e.w, line+"\n"); err != nil {
			return err
		}
	}
	return nil
}

func (e *consoleExporter) Shutdown(context.Context) error   { return nil }
func (e *consoleExporter) ForceFlush(context.Context) error { return nil }

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
