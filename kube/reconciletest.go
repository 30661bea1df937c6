package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	kevents "github.com/z5labs/humus/kube/internal/events"
	"github.com/z5labs/humus/kube/internal/objcache"
)

// This file is the unit tests' stand-in for a Controller: what a
// Reconciler reads from its reconcile's context (ListerFrom's caches,
// RecorderFrom's Recorder), filled by a test. It is in package kube, not
// a kubetest package of its own, because a Lister's cache is unexported:
// the Lister a test reads is the same Lister type, built by the same
// NewLister and reading through the same decode, so its copy semantics
// and its errors are the real ones by construction, not by imitation.

// ReconcileTest stands in for a Controller in a unit test of a Reconciler
// or of a Finalize's f: Context returns a context from which ListerFrom
// reads caches the test filled, and RecorderFrom a Recorder whose Events
// the test reads with Events, as a reconcile's context carries its
// Controller's. The Reconciler under test needs no seam of its own:
// handed rt.Context(ctx), the code that reads the Controller's caches in
// production reads the test's.
//
// Its caches are a Controller's in each respect a Lister shows: each
// object is encoded as an informer's cache holds it, once, when
// NewReconcileTest is called, so a test's later change to an object it
// passed isn't seen, and each Get or List decodes a new copy, the
// caller's to change; a Lister of a type its cache can't hold, or of a
// resource it has no cache of, fails as NewLister does. Its caches never
// change: a test of a write reads the write from its fake clientset, and a
// test of what a Reconciler does once the cache has caught up builds a
// new ReconcileTest.
//
// A ReconcileTest is safe for concurrent use.
type ReconcileTest struct {
	c      *Controller
	rec    *Recorder
	events *testEvents
}

// TestCache is one of a ReconcileTest's caches: TestObjects, TestMetadata
// or TestOwned.
type TestCache struct {
	gvr   schema.GroupVersionResource
	form  cacheForm
	owned bool // an Owns' cache, indexed by controller owner
	objs  []any
}

// TestObjects is a cache of gvr holding objs whole, as a Controller's
// cache of its own resource, and a Watches given CacheObjects, hold them.
// A Lister reads it into any type the objects' JSON decodes into whose
// pointer is a metav1.Object, such as corev1.ConfigMap or an Object of a
// Resource. Each of objs is a Kubernetes object, such as a
// *corev1.ConfigMap, an Object[Spec, Status] or an
// *unstructured.Unstructured, with a name; its apiVersion and kind may be
// unset, as a typed client-go object's are.
func TestObjects(gvr schema.GroupVersionResource, objs ...any) TestCache {
	return TestCache{gvr: gvr, form: cacheObjects, objs: objs}
}

// TestMetadata is a cache of gvr holding the metadata of objs, but their
// managed fields, as a Controller's cache of a Watches without
// CacheObjects holds them: a Lister reads it as
// metav1.PartialObjectMetadata. objs are as TestObjects'.
func TestMetadata(gvr schema.GroupVersionResource, objs ...any) TestCache {
	return TestCache{gvr: gvr, form: cacheMetadata, objs: objs}
}

// TestOwned is a cache of gvr holding what an Owns keeps of objs: their
// name, namespace, uid, resourceVersion and owner references. A Lister
// reads it as metav1.PartialObjectMetadata, and a List of it takes no
// selector; its ControlledBy reads it by controller owner, as an Owns'
// does. objs are as TestObjects'.
func TestOwned(gvr schema.GroupVersionResource, objs ...any) TestCache {
	return TestCache{gvr: gvr, form: cacheOwned, owned: true, objs: objs}
}

// TestOwnedObjects is a cache of gvr holding objs whole, as an Owns given
// CacheObjects holds them: a Lister reads it as TestObjects' is read, and
// its ControlledBy by controller owner, as an Owns' does. objs are as
// TestObjects'.
func TestOwnedObjects(gvr schema.GroupVersionResource, objs ...any) TestCache {
	return TestCache{gvr: gvr, form: cacheObjects, owned: true, objs: objs}
}

// NewReconcileTest returns a ReconcileTest of the controller named name
// (its Settings.Name, which errors name, and which reports the Events it
// records) with caches, each of its own resource. It returns one error
// naming every object that is nil, can't be encoded, has no name or has
// the namespace and name of an earlier object of its cache, every
// cache whose resource has no version or no plural resource, and every
// resource that two caches name: a Controller has one cache of each
// resource.
func NewReconcileTest(name string, caches ...TestCache) (*ReconcileTest, error) {
	c := &Controller{settings: Settings{Name: name}, listerCaches: map[schema.GroupVersionResource]*listerCache{}}
	var errs []error
	for _, tc := range caches {
		if _, ok := c.listerCaches[tc.gvr]; ok {
			errs = append(errs, fmt.Errorf("kube: NewReconcileTest: two caches of %s: a controller has one cache of each resource", tc.gvr))
			continue
		}
		if tc.gvr.Version == "" || tc.gvr.Resource == "" {
			errs = append(errs, fmt.Errorf("kube: NewReconcileTest: a cache of %q: name its resource's version and plural resource, such as {Version: \"v1\", Resource: \"configmaps\"}", tc.gvr))
		}
		indexers := cache.Indexers{}
		if tc.owned {
			indexers = ownsIndexers()
		}
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
		for i, obj := range tc.objs {
			item, err := tc.form.cached(obj)
			if err == nil && tc.owned && tc.form == cacheObjects {
				item, err = objcache.CompactOwned(item)
			}
			if err == nil {
				// A cache holds one object of a namespace/name: a second
				// would replace the first unseen.
				var key string
				if key, err = cache.MetaNamespaceKeyFunc(item); err == nil {
					if _, dup, _ := idx.GetByKey(key); dup {
						err = fmt.Errorf("a second object %s: a cache holds one object of each namespace/name", key)
					} else {
						err = idx.Add(item)
					}
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("kube: NewReconcileTest: object %d of %s: %w", i, tc.gvr, err))
			}
		}
		ch := &listerCache{form: tc.form}
		var inf cache.SharedIndexInformer = syncedCache{idx: idx}
		ch.informer.Store(&inf)
		c.listerCaches[tc.gvr] = ch
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	ev := &testEvents{}
	return &ReconcileTest{
		c:      c,
		rec:    &Recorder{r: kevents.NewRecorder(ev, "", "", slog.New(ev))},
		events: ev,
	}, nil
}

// Context returns ctx carrying what a reconcile's context carries for
// ListerFrom and RecorderFrom: rt's caches and its Recorder.
func (rt *ReconcileTest) Context(ctx context.Context) context.Context {
	return withScope(ctx, &scope{c: rt.c, rec: rt.rec})
}

// Recorder returns the Recorder RecorderFrom returns from Context's
// contexts.
func (rt *ReconcileTest) Recorder() *Recorder { return rt.rec }

// TestEvent is an Event a ReconcileTest's Recorder recorded, as the
// Controller's Recorder would have sent it.
type TestEvent struct {
	// Regarding names the object the Event is on: its own apiVersion and
	// kind when the object had both (a Controller's Recorder falls back to
	// its own resource's, which a ReconcileTest doesn't know), and its
	// namespace, name, uid and resourceVersion.
	Regarding corev1.ObjectReference
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Reason and Action are as Normal and Warning were given them.
	Reason, Action string
	// Note is the note as the API server would be sent it: cut to 1024
	// bytes.
	Note string
}

// Events returns the Events recorded so far, in the order they were
// recorded, and one error naming each object a Normal or a Warning was
// handed that isn't one, which a Controller's Recorder logs.
func (rt *ReconcileTest) Events() ([]TestEvent, error) {
	return rt.events.all()
}

// cached is obj as a cache of form holds it.
func (f cacheForm) cached(obj any) (any, error) {
	if obj == nil {
		return nil, errors.New("kube: the object is nil")
	}
	if v := reflect.ValueOf(obj); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("kube: the %T is nil", obj)
	}
	m, _, _, err := kevents.ObjectMeta(obj)
	if err != nil {
		return nil, err
	}
	if m.GetName() == "" {
		return nil, fmt.Errorf("the %T has no name", obj)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the %T: %w", obj, err)
	}
	switch f {
	case cacheObjects:
		var u unstructured.Unstructured
		if err := json.Unmarshal(b, &u.Object); err != nil {
			return nil, fmt.Errorf("the %T isn't a JSON object: %w", obj, err)
		}
		return objcache.CompactObject(&u)
	default:
		var p metav1.PartialObjectMetadata
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("decoding the metadata of the %T: %w", obj, err)
		}
		if f == cacheOwned {
			return objcache.CompactMetadata(&p)
		}
		return dropManagedFields(&p)
	}
}

// syncedCache is a ReconcileTest's informer: synced, holding idx. A
// Lister calls only HasSynced and GetIndexer; the embedded nil interface
// stands for the rest, which nothing calls.
type syncedCache struct {
	cache.SharedIndexInformer
	idx cache.Indexer
}

func (s syncedCache) HasSynced() bool           { return true }
func (s syncedCache) GetIndexer() cache.Indexer { return s.idx }

// testEvents keeps a ReconcileTest's Events, as client-go's
// events.EventRecorder, and its Recorder's errors, as its slog.Handler.
type testEvents struct {
	mu     sync.Mutex
	events []TestEvent
	errs   []error
}

var (
	_ events.EventRecorder = (*testEvents)(nil)
	_ slog.Handler         = (*testEvents)(nil)
)

func (e *testEvents) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	ev := TestEvent{Type: eventtype, Reason: reason, Action: action, Note: fmt.Sprintf(note, args...)}
	if ref, ok := regarding.(*corev1.ObjectReference); ok {
		ev.Regarding = *ref
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

func (e *testEvents) all() ([]TestEvent, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]TestEvent(nil), e.events...), errors.Join(e.errs...)
}

func (e *testEvents) Enabled(context.Context, slog.Level) bool { return true }

func (e *testEvents) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, errors.New(msg))
	return nil
}

func (e *testEvents) WithAttrs([]slog.Attr) slog.Handler { return e }
func (e *testEvents) WithGroup(string) slog.Handler      { return e }
