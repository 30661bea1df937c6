// Package apptest runs the example Apps whole, in-process, against a real
// cluster, for their tests: a cluster's clients and the files a pod would
// have, an App runner with signals the test sends, a Host whose API server
// can become unreachable, and waits with deadlines.
package apptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

// Env is a cluster and the admin's clients of it.
type Env struct {
	Cluster *controlplane.Cluster
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewEnv returns c's Env.
func NewEnv(t testing.TB, c *controlplane.Cluster) Env {
	t.Helper()
	rc := c.RESTConfig()
	rc.QPS = -1 // no client-side rate limit: the tests poll
	kc, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	dc, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	return Env{Cluster: c, Kube: kc, Dynamic: dc}
}

// Connection is the admin's Connection to the cluster.
func (e Env) Connection() kube.Connection {
	conn := kube.Connection{Server: e.Cluster.Server, TLS: e.Cluster.TLS}
	if tok := e.Cluster.Token; tok != "" {
		conn.Token = func(context.Context) (string, error) { return tok, nil }
	}
	return conn
}

// Config is the Config of an App named name that reconciles in watch
// ("" for every namespace), holds its Lease in leaseNS as identity, and
// serves its probes on a free port of 127.0.0.1.
func (e Env) Config(t testing.TB, name, watch, leaseNS, identity string) appconfig.Config {
	s := kube.DefaultSettings()
	s.Name = name
	s.Namespace = watch
	s.LeaderElection.Namespace = leaseNS
	s.LeaderElection.Identity = identity
	return appconfig.Config{Connection: e.Connection(), Settings: s, ProbesAddr: FreeAddr(t)}
}

// Namespace creates a namespace of its own for one test, named prefix and
// a random suffix.
func (e Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := e.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}

// Apply creates every object of the YAML file path, whose documents are
// separated by "---" lines, with the dynamic client, as kubectl create -f
// does; an object that already exists is left as it is.
func (e Env) Apply(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj unstructured.Unstructured
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object), path)
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		res, ok := resources[gvk.GroupKind()]
		require.True(t, ok, "%s: no resource known for %s", path, gvk.GroupKind())
		var ri dynamic.ResourceInterface = e.Dynamic.Resource(gvk.GroupVersion().WithResource(res))
		if ns := obj.GetNamespace(); ns != "" {
			ri = e.Dynamic.Resource(gvk.GroupVersion().WithResource(res)).Namespace(ns)
		}
		_, err = ri.Create(context.Background(), &obj, metav1.CreateOptions{FieldValidation: "Strict"})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		require.NoError(t, err, "creating %s %s from %s", gvk.Kind, obj.GetName(), path)
	}
}

// resources names the resources of the kinds the deploy files hold.
var resources = map[schema.GroupKind]string{
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: "customresourcedefinitions",
	{Kind: "Namespace"}:                                              "namespaces",
	{Kind: "ServiceAccount"}:                                         "serviceaccounts",
	{Group: "apps", Kind: "Deployment"}:                              "deployments",
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        "clusterroles",
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: "clusterrolebindings",
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               "roles",
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        "rolebindings",
}

// CRDGVR is the resource of CustomResourceDefinitions.
var CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD applies the CRD in the YAML file path, named name, waits
// until the API server has established it, and then restarts a started
// cluster's kube-controller-manager, so its garbage collector watches the
// new resource at once rather than at its next discovery, up to 30s later.
func (e Env) InstallCRD(t testing.TB, path, name string) {
	t.Helper()
	e.Apply(t, path)
	crds := e.Dynamic.Resource(CRDGVR)
	Eventually(t, 30*time.Second, "the CRD to be established", func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, e.Cluster.RestartControllerManager(context.Background()))
}

// Pod returns the Host of a pod whose service account is sa in namespace:
// the real network, a file system holding only the service account's CA
// and a token the TokenRequest API minted for sa, and an environment of
// the KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT the kubelet sets,
// POD_NAMESPACE namespace, POD_NAME pod, and extra.
func (e Env) Pod(t testing.TB, namespace, sa, pod string, extra map[string]string) humus.Host {
	t.Helper()
	token, err := e.Cluster.ServiceAccountToken(context.Background(), namespace, sa)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(e.Cluster.Server)
	require.NoError(t, err)
	env := map[string]string{
		appconfig.EnvServiceHost:  host,
		appconfig.EnvServicePort:  port,
		appconfig.EnvPodNamespace: namespace,
		appconfig.EnvPodName:      pod,
	}
	for k, v := range extra {
		env[k] = v
	}
	h := humus.OSHost()
	h.FS = fstest.MapFS{
		appconfig.ServiceAccountDir + "ca.crt": {Data: e.CAPEM(t)},
		appconfig.ServiceAccountDir + "token":  {Data: []byte(token)},
	}
	h.LookupEnv = LookupEnv(env)
	return h
}

// WithToken returns a clientset of the cluster that authenticates with the
// bearer token token.
func (e Env) WithToken(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	kc, err := kubernetes.NewForConfig(&rest.Config{
		Host:            "https://" + e.Cluster.Server,
		BearerToken:     token,
		QPS:             -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAPEM(t)},
	})
	require.NoError(t, err)
	return kc
}

// WaitAllowed waits until each request allow makes with the clientset kc
// is allowed: it returns nil, or an error that isn't a Forbidden. The API
// server's authorizer sees RBAC objects through a cache of its own, so a
// binding just created may not have taken effect yet.
func WaitAllowed(t testing.TB, kc kubernetes.Interface, allow ...func(ctx context.Context, kc kubernetes.Interface) error) {
	t.Helper()
	Eventually(t, 10*time.Second, "the RBAC rules to take effect", func(ctx context.Context) (bool, error) {
		for _, f := range allow {
			if err := f(ctx, kc); apierrors.IsForbidden(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// CAPEM returns the PEM of the cluster's CA, skipping the test when the
// cluster's kubeconfig names none.
func (e Env) CAPEM(t testing.TB) []byte {
	t.Helper()
	if len(e.Cluster.CA) == 0 {
		t.Skip("the cluster's kubeconfig names no CA")
	}
	return e.Cluster.CA
}

// LookupEnv returns a Host's LookupEnv whose environment is env.
func LookupEnv(env map[string]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		v, ok := env[key]
		return v, ok
	}
}

// FreeAddr returns an address on 127.0.0.1 whose port was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// Eventually polls cond every 20ms until it returns true, and fails the
// test naming what when it hasn't within timeout, or when it errs.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, cond)
	require.NoError(t, err, "waiting %v for %s", timeout, what)
}

// Ready waits until the probes at addr answer /readyz with 200.
func Ready(t testing.TB, addr string) {
	t.Helper()
	Eventually(t, 30*time.Second, "/readyz on "+addr+" to answer 200", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// IgnoreNotFound returns err, or nil when it is a NotFound.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Holder returns the holder of the Lease name in ns, or "" when it has
// none or doesn't exist.
func (e Env) Holder(ctx context.Context, ns, name string) (string, error) {
	l, err := e.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", IgnoreNotFound(err)
	}
	return *l.Spec.HolderIdentity, nil
}

// RequireNoHolder checks that the Lease name in ns exists and has no
// holder, as a released Lease has.
func (e Env) RequireNoHolder(t testing.TB, ns, name string) {
	t.Helper()
	l, err := e.Kube.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	if h := l.Spec.HolderIdentity; h != nil {
		require.Empty(t, *h, "the Lease's holder")
	}
}

// WaitHolder waits until identity holds the Lease name in ns.
func (e Env) WaitHolder(t testing.TB, timeout time.Duration, ns, name, identity string) {
	t.Helper()
	Eventually(t, timeout, identity+" to hold the Lease", func(ctx context.Context) (bool, error) {
		h, err := e.Holder(ctx, ns, name)
		return h == identity, err
	})
}

// App is a whole App that humustest.RunApp runs in-process, whose stderr
// the test reads.
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
