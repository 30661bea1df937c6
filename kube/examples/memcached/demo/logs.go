package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

// logPrinter is the App's Telemetry in the demo: it prints each log record
// the App emits (the controller's, client-go's and the finalizer's) under
// the current step, each of its lines prefixed "│ app", and counts the
// finalizer's records.
type logPrinter struct {
	out   io.Writer
	quiet bool
	min   log.Severity // the least severity printed

	mu          sync.Mutex
	finalizings int
}

// telemetry is the App's telemetry as appconfig.BuildTelemetry builds it,
// whose metrics the App serves at /metrics, but for its log records, which
// are the printer's rather than JSON lines on the Host's Stderr.
func (p *logPrinter) telemetry(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
	h.Stderr = io.Discard
	t, err := appconfig.BuildTelemetry(ctx, h)
	if err != nil {
		return humus.Telemetry{}, err
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(appconfig.MinSeverity(sdklog.NewSimpleProcessor(p), p.min)))
	shutdown := t.Shutdown
	t.LoggerProvider = lp
	t.Shutdown = func(ctx context.Context) error { return errors.Join(shutdown(ctx), lp.Shutdown(ctx)) }
	return t, nil
}

// finalized returns how many times the App's finalizer has run.
func (p *logPrinter) finalized() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finalizings
}

// Export is sdklog.Exporter's.
func (p *logPrinter) Export(_ context.Context, records []sdklog.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range records {
		body := r.Body().AsString()
		if body == "memcached finalized" && r.InstrumentationScope().Name == "github.com/z5labs/humus/kube/examples/memcached/app" {
			p.finalizings++
		}
		if p.quiet {
			continue
		}
		var attrs []string
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
			return true
		})
		sev := r.SeverityText()
		if sev == "" {
			sev = r.Severity().String()
		}
		// A multi-line body or attribute (such as an errors.Join error) gets
		// the prefix on each line, so it stays under the App's records.
		line := fmt.Sprintf("%-5s %s %s", sev, body, strings.Join(attrs, " "))
		for i, l := range strings.Split(strings.TrimRight(line, " \n"), "\n") {
			if i > 0 {
				l = "      " + l // under the body
			}
			fmt.Fprintf(p.out, "   │ app %s\n", l)
		}
	}
	return nil
}

// Shutdown is sdklog.Exporter's.
func (p *logPrinter) Shutdown(context.Context) error { return nil }

// ForceFlush is sdklog.Exporter's.
func (p *logPrinter) ForceFlush(context.Context) error { return nil }
