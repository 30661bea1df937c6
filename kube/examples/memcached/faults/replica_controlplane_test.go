//go:build controlplane

package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// appEnv, set in this test binary's environment, makes it the Memcached
// App (see TestMain): app.Init, as cmd/memcached runs it, whose telemetry
// also writes an event line to stdout as each reconcile starts and ends,
// as each request ends (with its start time), and for each log record.
const appEnv = "HUMUS_FAULTS_APP"

func TestMain(m *testing.M) {
	if os.Getenv(appEnv) != "" {
		w := &eventWriter{w: os.Stdout}
		// The moment the App receives SIGTERM, as its own clock reads
		// it: the test's clock before it sends the signal is earlier by
		// the signal's delivery, during which reconciles still start.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			w.write(event{T: time.Now(), Ev: "sigterm"})
		}()
		humus.Main(app.Init, humus.WithTelemetry(func(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
			return eventTelemetry(ctx, h, w)
		}))
		return
	}
	os.Exit(m.Run())
}

// event is one line a replica writes to its stdout.
type event struct {
	T      time.Time `json:"t"`
	Ev     string    `json:"ev"`               // reconcile-start, reconcile-end, request, log, sigterm
	Key    string    `json:"key,omitempty"`    // the object's namespace/name
	Method string    `json:"method,omitempty"` // a request's
	URL    string    `json:"url,omitempty"`    // a request's
	Body   string    `json:"body,omitempty"`   // a log record's
}

// eventTelemetry is the App's own telemetry (appconfig.BuildTelemetry: log
// records as JSON on stderr) with the events added: a span processor
// writes reconcile-start and reconcile-end for each reconcile span, and
// request for each client span (every request but a watch); a log
// processor writes each record's body and object. With METRICS_ADDR set,
// its metrics are appconfig.BuildTelemetry's, which ServeMetrics serves;
// without, it records none.
func eventTelemetry(ctx context.Context, h humus.Host, w *eventWriter) (humus.Telemetry, error) {
	exp, err := stdoutlog.New(stdoutlog.WithWriter(h.Stderr))
	if err != nil {
		return humus.Telemetry{}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spanEvents{w}))
	lp := sdklog.NewLoggerProvider(
		sdklog.WithProcessor(appconfig.MinSeverity(sdklog.NewSimpleProcessor(exp), otellog.SeverityInfo)),
		sdklog.WithProcessor(logEvents{w}))
	t := humus.Telemetry{
		TracerProvider: tp,
		LoggerProvider: lp,
		Shutdown: func(ctx context.Context) error {
			return errors.Join(tp.Shutdown(ctx), lp.Shutdown(ctx))
		},
	}
	if _, ok := h.LookupEnv(appconfig.EnvMetricsAddr); ok {
		base, err := appconfig.BuildTelemetry(ctx, h)
		if err != nil {
			return humus.Telemetry{}, errors.Join(err, t.Shutdown(ctx))
		}
		own := t.Shutdown
		t.MeterProvider = base.MeterProvider
		t.Shutdown = func(ctx context.Context) error { return errors.Join(own(ctx), base.Shutdown(ctx)) }
	}
	return t, nil
}

type eventWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *eventWriter) write(e event) {
	b, _ := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.w.Write(append(b, '\n'))
}

func objectKey(attrs []attribute.KeyValue) string {
	var ns, name string
	for _, kv := range attrs {
		switch kv.Key {
		case "k8s.namespace.name":
			ns = kv.Value.AsString()
		case "humus.kube.object.name":
			name = kv.Value.AsString()
		}
	}
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

type spanEvents struct{ w *eventWriter }

func (p spanEvents) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	switch {
	case strings.HasPrefix(s.Name(), "reconcile "):
		p.w.write(event{T: s.StartTime(), Ev: "reconcile-start", Key: objectKey(s.Attributes())})
	}
}

// OnEnd writes reconcile-end, and a client span's request, at its start
// time: otelhttp sets the method and URL only once the request is sent.
func (p spanEvents) OnEnd(s sdktrace.ReadOnlySpan) {
	switch {
	case strings.HasPrefix(s.Name(), "reconcile "):
		p.w.write(event{T: s.EndTime(), Ev: "reconcile-end", Key: objectKey(s.Attributes())})
	case s.SpanKind() == trace.SpanKindClient:
		e := event{T: s.StartTime(), Ev: "request", Method: s.Name()}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "http.request.method", "http.method":
				e.Method = kv.Value.AsString()
			case "url.full", "http.url":
				e.URL = kv.Value.AsString()
			}
		}
		p.w.write(e)
	}
}

func (spanEvents) Shutdown(context.Context) error   { return nil }
func (spanEvents) ForceFlush(context.Context) error { return nil }

type logEvents struct{ w *eventWriter }

func (p logEvents) OnEmit(_ context.Context, r *sdklog.Record) error {
	var attrs []attribute.KeyValue
	r.WalkAttributes(func(kv attribute.KeyValue) bool {
		attrs = append(attrs, kv)
		return true
	})
	t := r.Timestamp()
	if t.IsZero() {
		t = r.ObservedTimestamp()
	}
	p.w.write(event{T: t, Ev: "log", Key: objectKey(attrs), Body: r.Body().AsString()})
	return nil
}

func (logEvents) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (logEvents) Shutdown(context.Context) error                         { return nil }
func (logEvents) ForceFlush(context.Context) error                       { return nil }

// replica is one Memcached App run as a subprocess of the test, with the
// identity id.
type replica struct {
	id      string
	proc    *controlplane.Process
	stderr  *lockedBuffer
	metrics string // the address of its /metrics, over plain HTTP; "" without settings.Metrics

	mu     sync.Mutex
	events []event
	read   chan struct{} // closed once stdout is read to its end
}

// settings are a replica's Lease timings and workers, its WatchTimeout
// (0 for the default), whether it runs as a shard member (SHARDING) and
// caches only its share (SHARDING_CACHE=share, with Sharding), whether it
// serves its metrics (METRICS_ADDR on loopback, METRICS_SECURE=false), and
// the kubeconfig it reaches the cluster through ("" for the cluster's own).
type settings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Workers                                   int
	WatchTimeout                              time.Duration
	Sharding                                  bool
	CacheShare                                bool
	Metrics                                   bool
	Kubeconfig                                string
}

// fast are Lease timings that make a fault take seconds, as the whole-App
// tests use: about a quarter of the defaults' 15s, 10s and 2s, leaving a
// renewal on a busy machine six tries before RenewDeadline.
var fast = settings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond, Workers: 1}

// startReplica runs the Memcached App, as the replica id, that reconciles
// ns and holds its Lease there, reaching the cluster through its
// kubeconfig (or s.Kubeconfig), and reads its events; it is killed at the
// test's end if it still runs.
func startReplica(t *testing.T, e apptest.Env, ns, id string, s settings) *replica {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	kubeconfig := e.Cluster.Kubeconfig
	if s.Kubeconfig != "" {
		kubeconfig = s.Kubeconfig
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		appEnv+"=1",
		appconfig.EnvKubeconfig+"="+kubeconfig,
		appconfig.EnvPodNamespace+"="+ns,
		appconfig.EnvPodName+"="+id,
		appconfig.EnvWatchNS+"="+ns,
		appconfig.EnvProbesAddr+"="+controlplanetest.FreeAddr(t),
		appconfig.EnvWorkers+"="+strconv.Itoa(s.Workers),
		appconfig.EnvLeaseDuration+"="+s.LeaseDuration.String(),
		appconfig.EnvRenewDeadline+"="+s.RenewDeadline.String(),
		appconfig.EnvRetryPeriod+"="+s.RetryPeriod.String(),
	)
	if s.WatchTimeout > 0 {
		cmd.Env = append(cmd.Env, appconfig.EnvWatchTimeout+"="+s.WatchTimeout.String())
	}
	if s.Sharding {
		cmd.Env = append(cmd.Env, appconfig.EnvSharding+"=true")
	}
	if s.CacheShare {
		cmd.Env = append(cmd.Env, appconfig.EnvShardingCache+"="+appconfig.ShardingCacheShare)
	}
	r := &replica{id: id, stderr: &lockedBuffer{}, read: make(chan struct{})}
	if s.Metrics {
		r.metrics = controlplanetest.FreeAddr(t)
		cmd.Env = append(cmd.Env, appconfig.EnvMetricsAddr+"="+r.metrics, appconfig.EnvMetricsSecure+"=false")
	}
	cmd.Stderr = r.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	r.proc = controlplanetest.StartProcess(t, id, cmd)
	go func() {
		defer close(r.read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's stderr ends:\n%s", id, tail(r.stderr.String(), 8))
		}
	})
	return r
}

// Events returns what the replica has recorded so far.
func (r *replica) Events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// count counts the events ev of key ("" for any).
func (r *replica) count(ev, key string) int {
	n := 0
	for _, e := range r.Events() {
		if e.Ev == ev && (key == "" || e.Key == key) {
			n++
		}
	}
	return n
}

// waitExit waits up to d for the replica to exit, and returns its exit
// code, once its events are all read.
func (r *replica) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	code, err := r.proc.Wait(d)
	require.NoError(t, err, "%s's stderr ends:\n%s", r.id, tail(r.stderr.String(), 20))
	<-r.read
	return code
}

// kill kills the replica (SIGKILL), and waits for its events to be read.
func (r *replica) kill() {
	_ = r.proc.Kill()
	<-r.read
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
