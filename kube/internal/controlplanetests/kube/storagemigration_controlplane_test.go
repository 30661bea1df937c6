//go:build controlplane

package kube_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

type widgetSpec struct {
	Size int32 `json:"size"`
}

type widgetStatus struct {
	Seen int32 `json:"seen,omitempty"`
}

// widgets is a Resource at v2 in group: its controller watches v2, the
// version its CRD is switched to store.
func widgets(group string) kube.Resource[widgetSpec, widgetStatus] {
	return kube.Resource[widgetSpec, widgetStatus]{
		Group:   group,
		Version: "v2",
		Kind:    "Widget",
		Plural:  "widgets",
		Scope:   kube.Namespaced,
	}
}

// twoVersions is r's CRD with a v1 beside its v2, of the same schema
// (conversion None), v1 stored.
func twoVersions(t *testing.T, r kube.Resource[widgetSpec, widgetStatus]) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := r.CRD()
	require.NoError(t, err)
	v2 := crd.Spec.Versions[0]
	v1 := *v2.DeepCopy()
	v1.Name, v1.Storage = "v1", true
	v2.Storage = false
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{v1, v2}
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	return crd
}

// etcdReader reads the local control plane's etcd through its gRPC
// gateway, JSON over HTTP on the client URL (etcd serves it by default),
// so the test needs no etcd client.
type etcdReader struct{ url string }

// storedVersions returns the apiVersion each object whose key starts with
// prefix is stored at, by its key after prefix (namespace/name).
func (e etcdReader) storedVersions(t *testing.T, prefix string) map[string]string {
	t.Helper()
	end := []byte(prefix)
	end[len(end)-1]++
	body, err := json.Marshal(map[string]string{
		"key":       base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end),
	})
	require.NoError(t, err)
	resp, err := http.Post(e.url+"/v3/kv/range", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got struct {
		KVs []struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	versions := map[string]string{}
	for _, kv := range got.KVs {
		var obj struct {
			APIVersion string `json:"apiVersion"`
		}
		require.NoError(t, json.Unmarshal(kv.Value, &obj), "a custom resource is stored as JSON")
		versions[strings.TrimPrefix(string(kv.Key), prefix)] = obj.APIVersion
	}
	return versions
}

// count is how many of versions are apiVersion.
func count(versions map[string]string, apiVersion string) int {
	n := 0
	for _, v := range versions {
		if v == apiVersion {
			n++
		}
	}
	return n
}

// migrationEnv is a local control plane whose etcd the test reads.
type migrationEnv struct {
	env  controlplanetest.Env
	ext  apiextensionsclient.Interface
	etcd etcdReader
}

func startMigrationEnv(t *testing.T) migrationEnv {
	t.Helper()
	if controlplanetest.External() {
		t.Skip("reads the local control plane's etcd")
	}
	_, port, err := net.SplitHostPort(controlplanetest.FreeAddr(t))
	require.NoError(t, err)
	etcdPort, err := strconv.Atoi(port)
	require.NoError(t, err)
	cluster := controlplanetest.Start(t, func(o *controlplane.Options) { o.EtcdClientPort = etcdPort })
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	return migrationEnv{
		env:  controlplanetest.NewEnv(t, cluster),
		ext:  ext,
		etcd: etcdReader{url: "http://127.0.0.1:" + port},
	}
}

// setUp installs r's two-version CRD storing v1, creates n Widgets at v1
// in each of namespaces, switches the storage version to v2, and waits
// until the API server stores at v2. It returns the etcd prefix of the
// Widgets' keys.
func (m migrationEnv) setUp(t *testing.T, r kube.Resource[widgetSpec, widgetStatus], namespaces []string, n int) string {
	t.Helper()
	ctx := t.Context()
	apiServer{ext: m.ext, dyn: m.env.Dynamic}.install(t, twoVersions(t, r))
	v1 := schema.GroupVersionResource{Group: r.Group, Version: "v1", Resource: r.Plural}
	var wg sync.WaitGroup
	errs := make(chan error, len(namespaces)*n)
	for _, ns := range namespaces {
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					_, err := m.env.Dynamic.Resource(v1).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": r.Group + "/v1",
						"kind":       "Widget",
						"metadata":   map[string]any{"name": fmt.Sprintf("w%04d", i), "labels": map[string]any{"n": strconv.Itoa(i)}},
						"spec":       map[string]any{"size": int64(i)},
					}}, metav1.CreateOptions{FieldManager: "test-writer"})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	prefix := "/registry/" + r.Group + "/" + r.Plural + "/"
	stored := m.etcd.storedVersions(t, prefix)
	require.Len(t, stored, len(namespaces)*n)
	require.Equal(t, len(stored), count(stored, r.Group+"/v1"), "every Widget is stored at v1")

	crds := m.ext.ApiextensionsV1().CustomResourceDefinitions()
	crd, err := crds.Get(ctx, r.Plural+"."+r.Group, metav1.GetOptions{})
	require.NoError(t, err)
	crd.Spec.Versions[0].Storage, crd.Spec.Versions[1].Storage = false, true
	crd, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"v1", "v2"}, crd.Status.StoredVersions)

	// The API server's handler of the CRD switches to the new storage
	// version a moment after the update: until a Widget written now is
	// stored at v2, a probe is written again.
	probe := 0
	controlplanetest.Eventually(t, 30*time.Second, "a new Widget to be stored at v2", func(ctx context.Context) (bool, error) {
		probe++
		name := fmt.Sprintf("probe%d", probe)
		_, err := m.env.Dynamic.Resource(v1).Namespace(namespaces[0]).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": r.Group + "/v1",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"size": int64(1)},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return m.etcd.storedVersions(t, prefix)[namespaces[0]+"/"+name] == r.Group+"/v2", nil
	})
	return prefix
}

// snapshot is every Widget read at v2, by namespace/name.
func (m migrationEnv) snapshot(t *testing.T, r kube.Resource[widgetSpec, widgetStatus]) map[string]*unstructured.Unstructured {
	t.Helper()
	list, err := m.env.Dynamic.Resource(r.GVR()).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	objs := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		objs[list.Items[i].GetNamespace()+"/"+list.Items[i].GetName()] = &list.Items[i]
	}
	return objs
}

// migrator is a controller of r with Settings.MigrateStorage, connected
// through conn, recording into its own telemetry.
type migrator struct {
	tel *humustest.Telemetry
	// reconciles counts each object's reconciles, by namespace/name.
	mu         sync.Mutex
	reconciles map[string]int
	ctrl       *kube.Controller
	served     chan error
	cancel     context.CancelFunc
}

func startMigrator(t *testing.T, conn kube.Connection, r kube.Resource[widgetSpec, widgetStatus], identity string) *migrator {
	t.Helper()
	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, conn)
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "widget-controller"
	settings.LeaderElection.Namespace = "default"
	settings.LeaderElection.Identity = identity
	settings.MigrateStorage = true
	mg := &migrator{tel: tel, served: make(chan error, 1), reconciles: map[string]int{}}
	ctrl, err := kube.NewController(s, client, settings, r,
		kube.ReconcilerFunc[widgetSpec, widgetStatus](func(_ context.Context, w kube.Object[widgetSpec, widgetStatus]) (kube.Result[widgetStatus], error) {
			mg.mu.Lock()
			mg.reconciles[w.Namespace+"/"+w.Name]++
			mg.mu.Unlock()
			return kube.Result[widgetStatus]{}, nil
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	mg.ctrl, mg.cancel = ctrl, cancel
	go func() { mg.served <- ctrl.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = ctrl.Shutdown(context.Background())
	})
	return mg
}

// stop shuts the controller down and waits for Serve.
func (mg *migrator) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mg.cancel()
	require.NoError(t, mg.ctrl.Shutdown(ctx))
	require.NoError(t, <-mg.served)
}

// counts is the sum of the kube instrument name, by the value of the
// attribute attr.
func (mg *migrator) counts(t *testing.T, name, attr string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	m, ok := mg.tel.Metric("github.com/z5labs/humus/kube", name)
	if !ok {
		return got
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 counter", name)
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key(attr))
		got[v.AsString()] += dp.Value
	}
	return got
}

// waitRun waits until the migrator has counted a run of outcome.
func (mg *migrator) waitRun(t *testing.T, outcome string) {
	t.Helper()
	controlplanetest.Eventually(t, 2*time.Minute, "a storage migration run "+outcome, func(context.Context) (bool, error) {
		return mg.counts(t, "humus.kube.controller.storage_migration.runs", "humus.kube.controller.storage_migration.outcome")[outcome] > 0, nil
	})
}

// adminConnection is a Connection to the cluster as its admin.
func adminConnection(c *controlplane.Cluster) kube.Connection {
	return kube.Connection{
		Server: c.Server,
		TLS:    c.TLS,
		Token:  func(context.Context) (string, error) { return c.Token, nil },
	}
}

// patchGate is a proxy in front of the API server that passes every
// request, and the first allow merge patches of widgets, then holds every
// later one until its client gives up: a controller migrating through it
// is stopped in the middle of its run.
type patchGate struct {
	srv     *httptest.Server
	allow   int64
	patches atomic.Int64
	held    chan struct{} // closed when a patch is first held
	release chan struct{} // closed when the test ends
	once    sync.Once
}

func newPatchGate(t *testing.T, c *controlplane.Cluster, allow int64) *patchGate {
	t.Helper()
	g := &patchGate{allow: allow, held: make(chan struct{}), release: make(chan struct{})}
	target := &url.URL{Scheme: "https", Host: c.Server}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.Transport = &http.Transport{TLSClientConfig: c.TLS.Clone(), ForceAttemptHTTP2: true}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/widgets/") &&
			r.Header.Get("Content-Type") == "application/merge-patch+json" && g.patches.Add(1) > g.allow {
			// Read first: the server notices that the client gave up only
			// once the body is read.
			_, _ = io.Copy(io.Discard, r.Body)
			g.once.Do(func() { close(g.held) })
			select {
			case <-r.Context().Done():
			case <-g.release:
			}
			http.Error(w, "held", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	t.Cleanup(func() { close(g.release) })
	return g
}

// connection is a Connection to the cluster, as its admin, through g.
func (g *patchGate) connection(c *controlplane.Cluster) kube.Connection {
	pool := x509.NewCertPool()
	pool.AddCert(g.srv.Certificate())
	return kube.Connection{
		Server: strings.TrimPrefix(g.srv.URL, "https://"),
		TLS:    &tls.Config{RootCAs: pool},
		Token:  func(context.Context) (string, error) { return c.Token, nil },
	}
}

// crdStatus reads the CRD's storedVersions and its StorageMigrating
// condition.
func (m migrationEnv) crdStatus(t *testing.T, name string) ([]string, *apiextensionsv1.CustomResourceDefinitionCondition) {
	t.Helper()
	crd, err := m.ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range crd.Status.Conditions {
		if crd.Status.Conditions[i].Type == apiextensionsv1.StorageMigrating {
			return crd.Status.StoredVersions, &crd.Status.Conditions[i]
		}
	}
	return crd.Status.StoredVersions, nil
}

// TestStorageMigration changes a CRD's storage version from v1 to v2 with
// objects stored at v1 in two namespaces, more than one list page of them,
// and shows from etcd itself what the controller's migration does: stopped
// in the middle, it has rewritten only the objects it reached, and
// storedVersions still names v1; a new controller (a restart) rewrites
// only the objects still at v1 (the API server skips the write of one
// stored at v2 already: its resourceVersion is unchanged), every object
// is then stored at v2 and storedVersions is [v2]; no object changed but
// for its resourceVersion, managedFields included; and a third run does
// nothing. Then, as a ServiceAccount, the migration is refused without the
// documented rule on the CRD's status, and succeeds once it is bound.
func TestStorageMigration(t *testing.T) {
	m := startMigrationEnv(t)

	t.Run("interrupted, restarted, run again", func(t *testing.T) {
		r := widgets("migration.humus.example.com")
		namespaces := []string{m.env.Namespace(t, "migrate-a"), m.env.Namespace(t, "migrate-b")}
		prefix := m.setUp(t, r, namespaces, 300)
		crdName := r.Plural + "." + r.Group
		v1, v2 := r.Group+"/v1", r.Group+"/v2"
		before := m.snapshot(t, r)
		initially := m.etcd.storedVersions(t, prefix)
		atV1 := count(initially, v1)
		require.GreaterOrEqual(t, atV1, 600, "the probes written as the storage version changed may be at either")

		// Stopped after 100 writes.
		gate := newPatchGate(t, m.env.Cluster, 100)
		first := startMigrator(t, gate.connection(m.env.Cluster), r, "replica-1")
		select {
		case <-gate.held:
		case <-time.After(2 * time.Minute):
			t.Fatal("the migration didn't reach its 101st write")
		}
		first.stop(t)
		first.waitRun(t, "stopped")
		objs := first.counts(t, "humus.kube.controller.storage_migration.objects", "humus.kube.controller.storage_migration.result")
		require.Equal(t, int64(100), objs["rewritten"]+objs["unchanged"], "%v", objs)
		stored := m.etcd.storedVersions(t, prefix)
		afterFirst := count(stored, v1)
		require.Equal(t, int64(atV1-afterFirst), objs["rewritten"], "each object rewritten is stored at v2, and no other")
		require.Positive(t, afterFirst, "the migration was stopped in the middle")
		storedVersions, cond := m.crdStatus(t, crdName)
		require.Equal(t, []string{"v1", "v2"}, storedVersions, "an interrupted migration leaves storedVersions")
		require.NotNil(t, cond)
		require.Equal(t, apiextensionsv1.ConditionTrue, cond.Status)
		require.Equal(t, "MigrationRunning", cond.Reason)

		// A restart: the run starts over, and the API server skips the
		// writes of the objects stored at v2 already.
		second := startMigrator(t, adminConnection(m.env.Cluster), r, "replica-2")
		second.waitRun(t, "succeeded")
		objs = second.counts(t, "humus.kube.controller.storage_migration.objects", "humus.kube.controller.storage_migration.result")
		require.Equal(t, int64(afterFirst), objs["rewritten"], "only the objects still at v1 are written: %v", objs)
		require.Equal(t, int64(len(stored)-afterFirst), objs["unchanged"], "%v", objs)
		require.Zero(t, objs["gone"])
		stored = m.etcd.storedVersions(t, prefix)
		require.Len(t, stored, len(before))
		require.Equal(t, len(stored), count(stored, v2), "every object is stored at v2: %v", stored)
		storedVersions, cond = m.crdStatus(t, crdName)
		require.Equal(t, []string{"v2"}, storedVersions)
		require.NotNil(t, cond)
		require.Equal(t, apiextensionsv1.ConditionFalse, cond.Status)
		require.Equal(t, "MigrationSucceeded", cond.Reason)
		require.Contains(t, cond.Message, fmt.Sprintf("%d objects rewritten", afterFirst))

		// Nothing but the encoding changed: every field, labels and
		// managedFields too, is as it was; only the resourceVersion moved.
		after := m.snapshot(t, r)
		require.Len(t, after, len(before))
		for key, b := range before {
			a := after[key]
			require.NotNil(t, a, key)
			if initially[key] == v1 {
				require.NotEqual(t, b.GetResourceVersion(), a.GetResourceVersion(), "%s was rewritten", key)
			} else {
				require.Equal(t, b.GetResourceVersion(), a.GetResourceVersion(), "%s, stored at v2 already, wasn't", key)
			}
			b, a = b.DeepCopy(), a.DeepCopy()
			b.SetResourceVersion("")
			a.SetResourceVersion("")
			require.Equal(t, b.Object, a.Object, "%s changed", key)
		}

		// The migration's writes are the controller's own: no object is
		// reconciled again for them. A Widget created now is reconciled
		// after every event of theirs has been handled (the watch sends
		// events in order, and one worker takes keys in order).
		_, err := m.env.Dynamic.Resource(r.GVR()).Namespace(namespaces[1]).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": r.Group + "/v2",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": "sentinel"},
			"spec":       map[string]any{"size": int64(1)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		controlplanetest.Eventually(t, time.Minute, "the sentinel to be reconciled", func(context.Context) (bool, error) {
			second.mu.Lock()
			defer second.mu.Unlock()
			return second.reconciles[namespaces[1]+"/sentinel"] > 0, nil
		})
		second.mu.Lock()
		for key := range after {
			require.Equal(t, 1, second.reconciles[key], "%s is reconciled once, not again for its migration", key)
		}
		second.mu.Unlock()
		second.stop(t)

		// Run again: nothing to do.
		third := startMigrator(t, adminConnection(m.env.Cluster), r, "replica-3")
		third.waitRun(t, "not_needed")
		third.stop(t)
		require.Empty(t, third.counts(t, "humus.kube.controller.storage_migration.objects", "humus.kube.controller.storage_migration.result"))
		again := m.snapshot(t, r)
		for key, a := range after {
			require.Equal(t, a.GetResourceVersion(), again[key].GetResourceVersion(), "%s untouched", key)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		r := widgets("rbac.migration.humus.example.com")
		ns := m.env.Namespace(t, "migrate-rbac")
		prefix := m.setUp(t, r, []string{ns}, 10)
		atV1 := count(m.etcd.storedVersions(t, prefix), r.Group+"/v1")
		require.GreaterOrEqual(t, atV1, 10)
		crdName := r.Plural + "." + r.Group
		ctx := t.Context()
		kc := m.env.Kube

		// The controller's own rules (The RBAC a Controller needs), and
		// the migration's: get and update on this one CRD's status.
		_, err := kc.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "widget-migrator"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "widget-migrator", Namespace: "default"}}
		clusterRole(t, kc, "widget-controller", subject, []rbacv1.PolicyRule{
			{APIGroups: []string{r.Group}, Resources: []string{r.Plural}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{r.Group}, Resources: []string{r.Plural + "/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		})
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "widget-controller-lease"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		}}
		_, err = kc.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kc.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "widget-controller-lease"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   subject,
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		token, err := m.env.Cluster.ServiceAccountToken(ctx, "default", "widget-migrator")
		require.NoError(t, err)
		asSA := m.env.WithToken(t, token)
		controlplanetest.WaitAllowed(t, asSA, func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.CoordinationV1().Leases("default").Get(ctx, "none", metav1.GetOptions{})
			return err
		}, func(ctx context.Context, kc kubernetes.Interface) error {
			return kc.CoreV1().RESTClient().Get().AbsPath("/apis/"+r.Group+"/v2/"+r.Plural).Param("limit", "1").Do(ctx).Error()
		})
		conn := adminConnection(m.env.Cluster)
		conn.Token = func(context.Context) (string, error) { return token, nil }

		// Without the CRD status rule: refused, storedVersions kept.
		mg := startMigrator(t, conn, r, "replica-rbac")
		mg.waitRun(t, "failed")
		forbidden := false
		for _, rec := range mg.tel.Records() {
			if strings.Contains(rec.Body().AsString(), "storage migration failed") {
				rec.WalkAttributes(func(kv attribute.KeyValue) bool {
					if kv.Key == "error" && strings.Contains(kv.Value.AsString(), "forbidden") {
						forbidden = true
					}
					return true
				})
			}
		}
		require.True(t, forbidden, "the failure is logged, naming the refusal")
		storedVersions, _ := m.crdStatus(t, crdName)
		require.Equal(t, []string{"v1", "v2"}, storedVersions)
		require.Equal(t, atV1, count(m.etcd.storedVersions(t, prefix), r.Group+"/v1"), "nothing written before the CRD could be read")

		// With it: the next try succeeds.
		clusterRole(t, kc, "widget-controller-migration", subject, []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions/status"}, ResourceNames: []string{crdName}, Verbs: []string{"get", "update"}},
		})
		mg.waitRun(t, "succeeded")
		storedVersions, _ = m.crdStatus(t, crdName)
		require.Equal(t, []string{"v2"}, storedVersions)
		stored := m.etcd.storedVersions(t, prefix)
		require.Equal(t, len(stored), count(stored, r.Group+"/v2"))
		mg.stop(t)

		// The rule is limited to that CRD: another's status is refused.
		_, err = asSA.CoreV1().RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.migration.humus.example.com/status").DoRaw(ctx)
		require.True(t, apierrors.IsForbidden(err), "%v", err)
	})
}

// clusterRole creates a ClusterRole named name of rules, bound to subjects.
func clusterRole(t *testing.T, kc kubernetes.Interface, name string, subjects []rbacv1.Subject, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := t.Context()
	_, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// TestKubeControllerManagersStorageVersionMigration shows the alternative
// the docs name (Storage migration): on kube-apiserver v1.37.2 the API
// server serves storagemigration.k8s.io/v1 by default, but a
// StorageVersionMigration is carried out only when kube-controller-manager
// runs storage-version-migrator-controller, which kube's local control
// plane runs only when asked (WithControllers); then it rewrites the
// objects, as kube's migration does, and sets storedVersions.
func TestKubeControllerManagersStorageVersionMigration(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("reads the local control plane's etcd")
	}
	_, port, err := net.SplitHostPort(controlplanetest.FreeAddr(t))
	require.NoError(t, err)
	etcdPort, err := strconv.Atoi(port)
	require.NoError(t, err)
	cluster := controlplanetest.Start(t, controlplanetest.WithControllers("storage-version-migrator-controller"),
		func(o *controlplane.Options) { o.EtcdClientPort = etcdPort })
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	m := migrationEnv{env: controlplanetest.NewEnv(t, cluster), ext: ext, etcd: etcdReader{url: "http://127.0.0.1:" + port}}

	r := widgets("svm.migration.humus.example.com")
	prefix := m.setUp(t, r, []string{m.env.Namespace(t, "svm")}, 20)
	require.NoError(t, cluster.RestartControllerManager(t.Context()), "its garbage collector, which the migrator reads, watches the new resource at once")
	svms := m.env.Kube.StoragemigrationV1().StorageVersionMigrations()
	_, err = svms.Create(t.Context(), &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: r.Group, Resource: r.Plural}},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "the API server serves storagemigration.k8s.io/v1")
	controlplanetest.Eventually(t, 2*time.Minute, "the StorageVersionMigration to succeed and storedVersions to be [v2]", func(ctx context.Context) (bool, error) {
		svm, err := svms.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		storedVersions, _ := m.crdStatus(t, r.Plural+"."+r.Group)
		return meta.IsStatusConditionTrue(svm.Status.Conditions, string(svmv1.MigrationSucceeded)) && slices.Equal(storedVersions, []string{"v2"}), nil
	})
	stored := m.etcd.storedVersions(t, prefix)
	require.Equal(t, len(stored), count(stored, r.Group+"/v2"), "%v", stored)
}
