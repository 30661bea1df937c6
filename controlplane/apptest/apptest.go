// Package apptest runs an App of humus kube whole, against a real
// cluster (a local control plane, or the cluster controlplanetest's
// KUBECONFIG names), for its tests: the admin's Connection and Settings for
// the App, the Host of a pod of a ServiceAccount (its token and CA files,
// the files of the volumes it mounts, and the kubelet's environment), an
// in-process App runner whose stderr the test reads and to which it sends
// signals, an App built and run as a process of its own, a Host whose API
// server can become unreachable, in-memory telemetry whose records a
// failing test logs, the App's webhooks served with a test CA and the
// installed CRDs and webhook configurations pointed at them (Webhooks),
// and an installed CRD upgraded to a new version or storage version
// (Env.UpgradeCRD). What a test does to the cluster around the App (apply
// the deploy files, make a namespace, install a CRD, act as a
// ServiceAccount, wait for a condition or for readiness) is
// controlplanetest's, whose Env this Env embeds.
//
// It is part of the controlplane module, released and versioned with it
// (scripts/apicheck.sh guards its API), so a module of your own requires
// it on the same line as controlplanetest. It reads no environment
// variable of the test's: a Host it makes has the environment the test
// gives it.
package apptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// Env is controlplanetest's Env, a cluster and its admin's clients, with
// what an App of humus kube is run with on it: its Connection, its
// Config and a pod's Host.
type Env struct{ controlplanetest.Env }

// NewEnv returns c's Env.
func NewEnv(t testing.TB, c *controlplane.Cluster) Env {
	t.Helper()
	return Env{controlplanetest.NewEnv(t, c)}
}

// Connection is the admin's Connection to the cluster.
func (e Env) Connection() kube.Connection {
	conn := kube.Connection{Server: e.Cluster.Server, TLS: e.Cluster.TLS}
	if tok := e.Cluster.Token; tok != "" {
		conn.Token = func(context.Context) (string, error) { return tok, nil }
	}
	return conn
}

// Settings are kube.DefaultSettings of an App named name that reconciles
// in watch ("" for every namespace) and holds its Lease in leaseNS as
// identity. An App's probes can listen on controlplanetest.FreeAddr(t).
func (e Env) Settings(name, watch, leaseNS, identity string) kube.Settings {
	s := kube.DefaultSettings()
	s.Name = name
	s.Namespace = watch
	s.LeaderElection.Namespace = leaseNS
	s.LeaderElection.Identity = identity
	return s
}

// ServiceAccountDir is where the kubelet mounts a pod's service account
// token, CA and namespace, as a name in a Host's FS (no leading slash).
const ServiceAccountDir = "var/run/secrets/kubernetes.io/serviceaccount/"

// The environment variables a pod's Host has: the kubelet sets the first
// two in every container; the deploy files set the last two from the
// downward API (metadata.namespace and metadata.name).
const (
	EnvServiceHost  = "KUBERNETES_SERVICE_HOST"
	EnvServicePort  = "KUBERNETES_SERVICE_PORT"
	EnvPodNamespace = "POD_NAMESPACE"
	EnvPodName      = "POD_NAME"
)

// PodOption adds to the Host Pod returns.
type PodOption func(*podHost)

type podHost struct {
	fs  fstest.MapFS
	env map[string]string
}

// PodEnv adds the variables of env to the pod's environment, over the ones
// Pod sets.
func PodEnv(env map[string]string) PodOption {
	return func(h *podHost) {
		for k, v := range env {
			h.env[k] = v
		}
	}
}

// Mount adds files to the pod's file system under mountPath, an absolute
// path, as a volume mounted there holds them: such as a kubernetes.io/tls
// Secret's tls.crt and tls.key at the webhooks' certificate directory
// (see Webhooks.Mount). files maps a file's name in the volume to its
// content.
func Mount(mountPath string, files map[string][]byte) PodOption {
	return func(h *podHost) {
		dir := strings.Trim(path.Clean(mountPath), "/")
		for name, data := range files {
			h.fs[path.Join(dir, name)] = &fstest.MapFile{Data: data, Mode: 0o600}
		}
	}
}

// Pod returns the Host of a pod whose service account is sa in namespace:
// the real network; a file system holding only the service account's CA
// and a token the TokenRequest API minted for sa in ServiceAccountDir, and
// the files opts Mount; and an environment of the KUBERNETES_SERVICE_HOST
// and KUBERNETES_SERVICE_PORT the kubelet sets, POD_NAMESPACE namespace,
// POD_NAME pod, and what opts add with PodEnv. It fails the test if the
// token can't be minted.
func (e Env) Pod(t testing.TB, namespace, sa, pod string, opts ...PodOption) humus.Host {
	t.Helper()
	token, err := e.Cluster.ServiceAccountToken(context.Background(), namespace, sa)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(e.Cluster.Server)
	require.NoError(t, err)
	p := podHost{
		fs: fstest.MapFS{
			ServiceAccountDir + "ca.crt": {Data: e.CAPEM(t)},
			ServiceAccountDir + "token":  {Data: []byte(token)},
		},
		env: map[string]string{
			EnvServiceHost:  host,
			EnvServicePort:  port,
			EnvPodNamespace: namespace,
			EnvPodName:      pod,
		},
	}
	for _, o := range opts {
		o(&p)
	}
	h := humus.OSHost()
	h.FS = p.fs
	h.LookupEnv = LookupEnv(p.env)
	return h
}

// LookupEnv returns a Host's LookupEnv whose environment is env.
func LookupEnv(env map[string]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		v, ok := env[key]
		return v, ok
	}
}

// App is a whole App that humustest.RunApp runs in-process, whose stderr
// the test reads. Its humustest.App signals it and waits for its exit.
type App struct {
	*humustest.App
	stderr *syncBuffer
}

// Start runs init with humustest.RunApp on host, with a stderr the test
// reads and logs. The App gets SIGTERM when the test ends, if it still
// runs.
func Start(t testing.TB, init humus.Init, host humus.Host, opts ...humus.Option) *App {
	t.Helper()
	a := &App{stderr: &syncBuffer{}}
	host.Stderr = io.MultiWriter(a.stderr, testWriter{t})
	a.App = humustest.RunApp(t, host, init, opts...)
	return a
}

// Terminate sends SIGTERM and returns the exit code, failing the test if
// the App hasn't exited within 30s.
func (a *App) Terminate(t testing.TB) int {
	t.Helper()
	a.Signal(syscall.SIGTERM)
	return a.WaitExit(t, 30*time.Second)
}

// WaitExit returns the App's exit code, failing the test if it hasn't
// exited within d.
func (a *App) WaitExit(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-a.Done():
		return a.Wait()
	case <-time.After(d):
		t.Fatalf("the App has not exited within %v; its stderr:\n%s", d, a.stderr)
		return -1
	}
}

// Stderr returns what the App has written to its stderr.
func (a *App) Stderr() string { return a.stderr.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testWriter logs what the App writes to its stderr.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("app stderr: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// CuttableDial dials as the OS does, until Cut: then it closes every
// connection it made and fails every dial after, as when the API server
// has become unreachable.
type CuttableDial struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// Dial is a humus.Host's Dial.
func (d *CuttableDial) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, fmt.Errorf("apptest: dialling %s: %w", address, errUnreachable)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, c)
	return c, nil
}

var errUnreachable = errors.New("the API server is unreachable")

// Cut makes the API server unreachable.
func (d *CuttableDial) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}

// NewTelemetry returns humustest's in-memory Telemetry, whose log records
// the test logs if it fails, to show what the App said.
func NewTelemetry(t testing.TB) *humustest.Telemetry {
	tel := humustest.NewTelemetry(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range tel.Records() {
			var attrs []string
			r.WalkAttributes(func(kv attribute.KeyValue) bool {
				attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
				return true
			})
			t.Logf("app record: %s %s %s", r.Severity(), r.Body().Emit(), strings.Join(attrs, " "))
		}
	})
	return tel
}

// CountRecords counts the log records whose body is body, of objects in
// the namespace ns (their k8s.namespace.name attribute): an App that
// watches every namespace, as the deploy files' does, also acts on other
// tests' objects.
func CountRecords(tel *humustest.Telemetry, body, ns string) int {
	n := 0
	for _, r := range tel.Records() {
		if r.Body().AsString() != body {
			continue
		}
		in := false
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			in = kv.Key == "k8s.namespace.name" && kv.Value.AsString() == ns
			return !in
		})
		if in {
			n++
		}
	}
	return n
}

// CountSpans counts the ended spans named name.
func CountSpans(tel *humustest.Telemetry, name string) int {
	n := 0
	for _, s := range tel.Spans() {
		if s.Name() == name {
			n++
		}
	}
	return n
}
