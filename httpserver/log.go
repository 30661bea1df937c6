package httpserver

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
)

// scope is the instrumentation scope of the server's log records.
const scope = "github.com/z5labs/humus/httpserver"

// logWriter turns each line net/http's server logs into a log record of
// the App's LoggerProvider, in place of the log package's default logger,
// which writes to the process's standard error.
type logWriter struct {
	logger log.Logger
	attrs  []attribute.KeyValue
}

func newLogWriter(lp log.LoggerProvider, name, addr string) *logWriter {
	return &logWriter{
		logger: lp.Logger(scope),
		attrs:  []attribute.KeyValue{attribute.String("humus.server.name", name), attribute.String("server.address", addr)},
	}
}

// Write emits p, one line of net/http's server log, as a record whose
// severity is severityOf's.
func (w *logWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\n")
	sev, text := severityOf(msg)
	ctx := context.Background()
	if !w.logger.Enabled(ctx, log.EnabledParameters{Severity: sev}) {
		return len(p), nil
	}
	var r log.Record
	r.SetTimestamp(time.Now())
	r.SetSeverity(sev)
	r.SetSeverityText(text)
	r.SetBody(attribute.StringValue(msg))
	r.AddAttributes(w.attrs...)
	w.logger.Emit(ctx, r)
	return len(p), nil
}

// severityOf ranks a line of net/http's server log: a TLS handshake the
// client ended before it began (EOF, as a TCP probe or a load balancer's
// health check does) is DEBUG, since it says nothing is wrong; any other
// failed handshake, such as a client that doesn't trust the certificate,
// is WARN, since it is the client's to fix, or the certificate's; the rest
// (a handler's panic, a failed Accept) is ERROR.
func severityOf(msg string) (log.Severity, string) {
	if !strings.HasPrefix(msg, "http: TLS handshake error") {
		return log.SeverityError, "ERROR"
	}
	if strings.HasSuffix(msg, ": EOF") {
		return log.SeverityDebug, "DEBUG"
	}
	return log.SeverityWarn, "WARN"
}
