package kube

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The test resource: a namespaced Widget, whose status records the size it
// last saw.
type widgetSpec struct {
	Size int64 `json:"size"`
}

type widgetStatus struct {
	Seen    int64  `json:"seen,omitempty"`
	Message string `json:"message,omitempty"`
}

type widget = Object[widgetSpec, widgetStatus]

const (
	testNamespace  = "default"
	leaseNamespace = "kube-system"
	controllerName = "widget-controller"
)

func widgets() Resource[widgetSpec, widgetStatus] {
	return Resource[widgetSpec, widgetStatus]{
		Group:   "test.example.com",
		Version: "v1",
		Kind:    "Widget",
		Plural:  "widgets",
		Scope:   Namespaced,
	}
}

var (
	widgetGVR     = schema.GroupVersionResource{Group: "test.example.com", Version: "v1", Resource: "widgets"}
	namespaceGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configMapGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deploymentGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// newWidget returns a Widget as the API server would serve it, with managed
// fields, which the controller's cache drops.
func newWidget(name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.example.com/v1",
		"kind":       "Widget",
		"metadata": map[string]any{
			"name":      name,
			"namespace": testNamespace,
			"uid":       "uid-" + name,
		},
		"spec": map[string]any{"size": size},
	}}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "test.example.com/v1"}})
	return u
}

func testSettings() Settings {
	s := DefaultSettings()
	s.Name = controllerName
	s.LeaderElection.Namespace = leaseNamespace
	s.LeaderElection.Identity = "replica-1"
	return s
}

// fakeCluster is client-go's fake dynamic, metadata and typed clients,
// with an apply reactor of the test's own: the fake dynamic client handles
// an apply as a strategic merge patch, which an unstructured object can't
// take. The reactor does what server-side apply does for the controller's
// one field manager: a status apply replaces the status, and a metadata
// apply sets the finalizers it owns; an object being deleted whose last
// finalizer is removed is deleted, as the API server does. As the API
// server's, a metadata apply to an object that doesn't exist creates it,
// unless it names a uid; an apply naming another uid is refused.
type fakeCluster struct {
	dynamic  *dynamicfake.FakeDynamicClient
	metadata *metadatafake.FakeMetadataClient
	kube     *kubefake.Clientset

	mu      sync.Mutex
	applies []applyRecord
	// rv is the last resourceVersion given to a write (an apply, or a
	// test's own update): integers that grow, as kube-apiserver's do, and
	// which the tracker leaves alone. A catch-up compares them as
	// integers; two that aren't compare only for equality, so a cache
	// that stored a write made after the catch-up's list would never look
	// current. They are one count over every resource, while the tracker
	// gives each list a count of its resource's writes: a store's version
	// and a list's aren't on one scale, so cachePassed can judge a cache
	// current early (the catch-up's own tests use the API server's).
	rv int
	// idleHolder is the Lease's holder when the Controller closed its idle
	// connections, and idleCloses how often it did.
	idleHolder string
	idleCloses int
}

// nextResourceVersion returns a resourceVersion newer than every one
// given before.
func (f *fakeCluster) nextResourceVersion() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	return strconv.Itoa(f.rv)
}

type applyRecord struct {
	gvr          schema.GroupVersionResource
	namespace    string
	name         string
	subresource  string
	fieldManager string
	force        bool
	body         map[string]any
}

func newFakeCluster(t testing.TB, objs ...runtime.Object) *fakeCluster {
	t.Helper()
	listKinds := map[schema.GroupVersionResource]string{
		widgetGVR:    "WidgetList",
		namespaceGVR: "NamespaceList",
		configMapGVR: "ConfigMapList",
	}
	f := &fakeCluster{
		dynamic:  dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...),
		metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
		kube:     kubefake.NewClientset(),
	}
	f.dynamic.PrependReactor("patch", "*", f.apply)
	return f
}

func (f *fakeCluster) clients() clients {
	return clients{dynamic: f.dynamic, metadata: f.metadata, kube: f.kube, closeIdle: f.closeIdle}
}

// closeIdle records that the Controller closed its Client's idle
// connections, and who held the Lease then.
func (f *fakeCluster) closeIdle() {
	l, err := f.kube.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), controllerName, metav1.GetOptions{})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idleCloses++
	f.idleHolder = "no Lease"
	if err == nil {
		f.idleHolder = holder(l)
	}
}

func (f *fakeCluster) apply(action clienttesting.Action) (bool, runtime.Object, error) {
	pa, ok := action.(clienttesting.PatchActionImpl)
	if !ok || pa.GetPatchType() != types.ApplyPatchType {
		return false, nil, nil
	}
	var applied unstructured.Unstructured
	if err := applied.UnmarshalJSON(pa.GetPatch()); err != nil {
		return true, nil, err
	}
	body := applied.Object
	gvr, ns, name := pa.GetResource(), pa.GetNamespace(), pa.GetName()
	opts := pa.GetPatchOptions()
	f.mu.Lock()
	f.applies = append(f.applies, applyRecord{
		gvr: gvr, namespace: ns, name: name, subresource: pa.GetSubresource(),
		fieldManager: opts.FieldManager, force: opts.Force != nil && *opts.Force, body: body,
	})
	f.mu.Unlock()

	tracker := f.dynamic.Tracker()
	uid, _, _ := unstructured.NestedString(body, "metadata", "uid")
	obj, err := tracker.Get(gvr, ns, name)
	switch {
	case apierrors.IsNotFound(err) && pa.GetSubresource() == "" && uid == "":
		// An apply to an object that doesn't exist creates it, as the API
		// server's does (a subresource's never does).
		created := applied.DeepCopy()
		created.SetUID(types.UID("created-by-apply"))
		return true, created, tracker.Create(gvr, created, ns)
	case apierrors.IsNotFound(err) && uid != "":
		// The API server's patch handler: "uid mismatch: the provided
		// object specified uid ..., and no existing object was found".
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, errors.New("uid mismatch: no existing object was found"))
	case err != nil:
		return true, nil, err
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	u.SetResourceVersion(f.nextResourceVersion())
	if uid != "" && types.UID(uid) != u.GetUID() {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: gvr.Group, Kind: u.GetKind()}, name, nil)
	}
	switch pa.GetSubresource() {
	case "status":
		u.Object["status"] = body["status"]
	case "":
		fins, _, _ := unstructured.NestedStringSlice(body, "metadata", "finalizers")
		u.SetFinalizers(fins)
		if len(fins) == 0 && u.GetDeletionTimestamp() != nil {
			return true, u, tracker.Delete(gvr, ns, name)
		}
	default:
		return true, nil, apierrors.NewBadRequest("no subresource " + pa.GetSubresource())
	}
	return true, u, tracker.Update(gvr, u, ns)
}

// statusApplies returns the status applies made so far.
func (f *fakeCluster) statusApplies() []applyRecord { return f.appliesTo("status") }

// metadataApplies returns the applies of the object itself (its finalizer)
// made so far.
func (f *fakeCluster) metadataApplies() []applyRecord { return f.appliesTo("") }

// appliesTo returns the applies to subresource ("" for the object) made so
// far.
func (f *fakeCluster) appliesTo(subresource string) []applyRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []applyRecord
	for _, a := range f.applies {
		if a.subresource == subresource {
			out = append(out, a)
		}
	}
	return out
}

func (f *fakeCluster) get(t testing.TB, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := f.dynamic.Tracker().Get(gvr, ns, name)
	require.NoError(t, err)
	return obj.(*unstructured.Unstructured)
}

func (f *fakeCluster) create(t testing.TB, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	t.Helper()
	require.NoError(t, f.dynamic.Tracker().Create(gvr, u, u.GetNamespace()))
}

func (f *fakeCluster) update(t testing.TB, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	t.Helper()
	require.NoError(t, f.dynamic.Tracker().Update(gvr, u, u.GetNamespace()))
}

// markDeleted sets the object's deletionTimestamp, as the API server does
// when an object with finalizers is deleted.
func (f *fakeCluster) markDeleted(t testing.TB, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	u := f.get(t, gvr, ns, name).DeepCopy()
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	f.update(t, gvr, u)
}

func (f *fakeCluster) exists(gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := f.dynamic.Tracker().Get(gvr, ns, name)
	return err == nil
}

func (f *fakeCluster) lease(t testing.TB) *coordinationv1.Lease {
	t.Helper()
	l, err := f.kube.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), controllerName, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// recordsWithBody returns tel's log records whose body is body.
func recordsWithBody(tel *humustest.Telemetry, body string) []sdklog.Record {
	var out []sdklog.Record
	for _, rec := range tel.Records() {
		if rec.Body().AsString() == body {
			out = append(out, rec)
		}
	}
	return out
}

// newWidgetController builds a controller of Widgets on f's clients.
func newWidgetController(t testing.TB, f *fakeCluster, tel humus.Telemetry, settings Settings, rec Reconciler[widgetSpec, widgetStatus], parts ...Part) *Controller {
	t.Helper()
	c, err := newController(&humus.Setup{Telemetry: tel}, f.clients(), nil, settings, widgets(), rec, parts...)
	require.NoError(t, err)
	return c
}

// serving is a Controller's Serve running in its own goroutine.
type serving struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Serve's, once done is closed
}

func serve(t testing.TB, c *Controller) *serving {
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = c.Serve(ctx)
	}()
	// A test that fails part way still stops the controller, so its
	// bubble reports the failure rather than the goroutines left.
	t.Cleanup(func() {
		cancel()
		_ = c.Shutdown(context.Background())
		<-s.done
	})
	return s
}

// stop cancels Serve's context, as humus.Run does on SIGTERM, calls
// Shutdown, and returns Serve's error.
func (s *serving) stop(t testing.TB) error {
	t.Helper()
	s.cancel()
	require.NoError(t, s.c.Shutdown(context.Background()))
	<-s.done
	return s.err
}

// attrs returns a record's attributes as strings.
func attrs(rec sdklog.Record) map[string]string {
	out := map[string]string{}
	rec.WalkAttributes(func(kv attribute.KeyValue) bool {
		out[string(kv.Key)] = kv.Value.Emit()
		return true
	})
	return out
}

// counter counts calls by object name.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
	return c.n[name]
}

func (c *counter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// times records when something happened, such as each reconcile of an
// object, by synctest's clock.
type times struct {
	mu sync.Mutex
	at []time.Time
}

// add records that it happened now, and returns how many times it has.
func (ts *times) add() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.at = append(ts.at, time.Now())
	return len(ts.at)
}

// get returns when it happened, in order.
func (ts *times) get() []time.Time {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]time.Time(nil), ts.at...)
}
