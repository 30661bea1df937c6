package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/z5labs/humus/kube/internal/applyset"
	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/objcache"
	"github.com/z5labs/humus/kube/internal/outage"
	"github.com/z5labs/humus/kube/internal/storagemigration"
)

// Reconciler brings the cluster to what an object's spec declares.
type Reconciler[Spec, Status any] interface {
	// Reconcile is handed obj, its own copy of the object as the cache last
	// saw it, and returns what obj's status is now. Its context carries the
	// reconcile's span, and is cancelled only when Shutdown's context is
	// done or the Lease is lost. An error retries obj with backoff; it
	// never ends the Service.
	Reconcile(ctx context.Context, obj Object[Spec, Status]) (Result[Status], error)
}

// ReconcilerFunc is a function that is a Reconciler.
type ReconcilerFunc[Spec, Status any] func(ctx context.Context, obj Object[Spec, Status]) (Result[Status], error)

// Reconcile calls f(ctx, obj).
func (f ReconcilerFunc[Spec, Status]) Reconcile(ctx context.Context, obj Object[Spec, Status]) (Result[Status], error) {
	return f(ctx, obj)
}

// Result is what a reconcile leaves its object with.
type Result[Status any] struct {
	// Status is the object's status now. nil leaves it as it is. The
	// controller applies it to the status subresource with server-side
	// apply when it differs from the object's, compared by their JSON
	// encodings, whether or not Reconcile returned an error, so a failure
	// can be a condition.
	Status *Status

	// After reconciles the object again after this long, unless it changes
	// first. Zero waits for a change, or for the resync, and so does a
	// negative After. An error's backoff takes its place. For a Resource
	// with StatusConventions, After alone leaves the object Ready: a
	// reconcile that isn't done yet says so with Waiting.
	After time.Duration

	// Waiting, for a Resource with StatusConventions, says that the
	// reconcile succeeded but the object isn't ready yet, and why, such
	// as "1/3 replicas available": it waits on something whose change
	// reconciles it again, such as an owned Deployment's status. kube
	// then writes Ready False and Reconciling True, with ReasonWaiting and
	// Waiting as their message, where kstatus, kubectl wait and Argo CD
	// see the object in progress. "" is ready. A Resource without
	// StatusConventions ignores it.
	Waiting string
}

// Part is a part of a controller beyond its Reconciler: Owns, Watches or
// Finalize.
type Part interface{ part() }

// ErrLostLeadership is what Serve returns when the replica loses the Lease
// while it serves: renewal failed for RenewDeadline, or another replica
// took the Lease. The App exits 1, and the restarted pod campaigns again.
var ErrLostLeadership = errors.New("kube: lost the lease")

// Controller reconciles the objects of one Resource or one Kind. It is a
// humus.Service: Serve runs it until its context is done, and Shutdown
// waits for it: see Serve and Shutdown.
type Controller struct {
	settings Settings
	gvr      schema.GroupVersionResource
	group    string // the group an owner reference names, for Owns
	kind     string
	scope    Scope
	status   bool // a Resource's: its status is applied (a Kind's isn't)
	owns     []informerSpec
	watches  []mappedResource
	// userSelectors are the resource's and each Owns' label selectors as
	// the user gave them, by GVR string, with Sharding.CacheShare on
	// (shareSelectors); nil without it.
	userSelectors map[string]string

	// ownsOnce makes owned, the Owns as internal/echoes reads a write's
	// path against them, once: a reconcile's every write reads them
	// (ownedWrite).
	ownsOnce sync.Once
	owned    []echoes.Owned
	pruned   []schema.GroupVersionResource // the resources of the Owns that prune (prune.go)

	// listerCaches are the informers' caches a Lister reads, by resource
	// (listers.go).
	listerCaches map[schema.GroupVersionResource]*listerCache

	// finalizer is Finalize's name, or "" without Finalize.
	finalizer string
	// finalized holds the uid of each object whose finalizer the
	// controller has removed, until the informer sees it deleted: until
	// then the cache still shows it with its finalizer, and a key queued
	// again while f ran would run f a second time.
	finalized sync.Map // types.UID → struct{}
	// blocked holds, for each object being deleted whose finalizer can't
	// run because it can't be decoded, the message blockedFinalizer
	// applied, until the informer sees it deleted.
	blocked sync.Map // types.UID → string
	// echoes keeps the events of the controller's own applies, the
	// status's and the finalizer's, from queueing their objects again
	// (internal/echoes).
	echoes echoes.Filter
	// ownedCreations keeps the Reconciler's writes to owned resources from
	// queueing their owners again (ownedcreations.go).
	ownedCreations echoes.Filter
	// applySet is the group-kinds of the controller's ApplySets, found
	// once (prune.go).
	applySet applyset.GroupKinds
	// typed is the part of a reconcile that knows the object's Go type
	// (reconcile.go).
	typed typedReconciler
	// outage tells the API server refusing every reconcile alike from an
	// object failing on its own (internal/outage); newQueue sets it, before any
	// worker starts.
	outage *outage.Outage

	clients clients
	tel     *telemetry

	// migration is Settings.MigrateStorage's job, or nil
	// (storagemigration.go, internal/storagemigration).
	migration *storagemigration.Migration

	synced  atomic.Bool                 // readiness.go
	current atomic.Pointer[informerSet] // once synced, for Synced's staleness

	starting atomic.Pointer[informerSet] // once started, for Synced's errors before they sync

	recorder atomic.Pointer[Recorder] // events.go: set by Serve

	mu      sync.Mutex
	serving bool
	stopped bool               // Shutdown was called
	cancel  context.CancelFunc // ends Serve's loop, as its context does
	force   context.CancelFunc // cancels the reconciles in flight
	done    chan struct{}      // closed when Serve returns
}

var _ humus.Service = (*Controller)(nil)

// clients are the client-go clients a Controller uses. NewController builds
// them from the Client's Config; the package's tests set client-go's fakes
// through newController, the unexported seam.
type clients struct {
	dynamic  dynamic.Interface    // the resource itself, and its status and finalizer applies
	cached   *objcache.Client     // the resource's list and watch; nil for fakes, which use dynamic
	metadata metadata.Interface   // the owned resources, through Owns
	kube     kubernetes.Interface // the Lease

	// closeIdle closes the transport's idle connections; nil for fakes.
	closeIdle func()
}

// closeIdleConnections closes the idle connections of the Client the
// clients were built on, if any.
func (cl clients) closeIdleConnections() {
	if cl.closeIdle != nil {
		cl.closeIdle()
	}
}

// connect builds the Controller's clients on c's transport. It opens no
// connection.
func connect(c *Client) (clients, error) {
	if c == nil {
		return clients{}, errors.New("kube: the Client is nil")
	}
	cfg := c.Config()
	dyn, err1 := dynamic.NewForConfig(cfg)
	md, err2 := metadata.NewForConfig(cfg)
	kc, err3 := kubernetes.NewForConfig(cfg)
	cc, err4 := objcache.NewClient(cfg)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return clients{}, fmt.Errorf("kube: building the controller's clients: %w", err)
	}
	return clients{dynamic: dyn, cached: cc, metadata: md, kube: kc, closeIdle: c.CloseIdleConnections}, nil
}

// NewController returns a Controller of r's objects, reconciled by rec. It
// opens no connection. It returns one error naming every mistake in
// settings, in r, as CRD reports them, and in parts: a Finalize or
// References whose object type isn't Object[Spec, Status], a label
// selector that doesn't parse, two parts naming one resource, and a
// cluster-scoped r with a Settings.Namespace among them. It also returns an error if one of the
// controller's instruments can't be created from s.Telemetry.
func NewController[Spec, Status any](s *humus.Setup, c *Client, settings Settings, r Resource[Spec, Status], rec Reconciler[Spec, Status], parts ...Part) (*Controller, error) {
	cl, err := connect(c)
	return newController(s, cl, err, settings, r, rec, parts...)
}

// newController is NewController with its clients given: the seam the
// package's tests set client-go's fakes through.
func newController[Spec, Status any](s *humus.Setup, cl clients, clErr error, settings Settings, r Resource[Spec, Status], rec Reconciler[Spec, Status], parts ...Part) (*Controller, error) {
	errs := []error{clErr, settings.check()}
	if _, err := r.CRD(); err != nil {
		errs = append(errs, err)
	}
	if r.Scope == Cluster && settings.Namespace != "" {
		errs = append(errs, fmt.Errorf("kube: %s is cluster-scoped, so Settings.Namespace must be \"\", not %q", r.Kind, settings.Namespace))
	}
	if isNil(rec) {
		errs = append(errs, errors.New("kube: the Reconciler is nil"))
	}
	p, err := collectParts[Object[Spec, Status]](parts)
	errs = append(errs, err, checkApplySetParent(r.Kind, r.Labels, p.owns))

	// With StatusConventions, its error is CRD's, joined above.
	conv, _ := newStatusConventions(r)
	t := objectType[Object[Spec, Status]]{
		callReconciler: func(ctx context.Context, obj Object[Spec, Status], before []byte) (time.Duration, any, error) {
			if conv != nil {
				return conv.reconcile(ctx, rec, obj, before)
			}
			res, err := rec.Reconcile(ctx, obj)
			if res.Status == nil {
				return res.After, nil, err
			}
			return res.After, res.Status, err
		},
		status:   func(obj *Object[Spec, Status]) any { return &obj.Status },
		finalize: p.finalize,
	}
	return build(s, cl, settings, r.GVR(), r.Group, r.Kind, r.Scope, p, t, errs)
}

// parts is what a controller's Parts add to it, for its object type T.
type parts[T any] struct {
	owns          []informerSpec
	watches       []mappedResource
	finalizerName string
	finalize      func(ctx context.Context, obj T) error // nil without Finalize
}

// collectParts sorts ps into Owns, Watches and Finalize, and returns one
// error naming every Part that is wrong, such as a Finalize of another
// type.
func collectParts[T any](ps []Part) (parts[T], error) {
	var p parts[T]
	var errs []error
	for i, part := range ps {
		switch part := part.(type) {
		// A part with a mistake in its options, such as a nil MapFunc,
		// but a well-formed informer, is still kept, so that a second
		// informer of its resource is named in the same error
		// (newListerCaches): with any error, no Controller is built from
		// them.
		case ownsPart:
			if err := part.check(); err != nil {
				errs = append(errs, fmt.Errorf("kube: part %d: %w", i, err))
				if part.informerSpec.check("") != nil {
					continue
				}
			}
			p.owns = append(p.owns, part.informerSpec)
		case watchesPart:
			w, err := mappedResourceOf[T](part, fmt.Sprintf("humus.kube/references-%d", i))
			if err != nil {
				errs = append(errs, fmt.Errorf("kube: part %d: %w", i, err))
				if part.informerSpec.check("") != nil {
					continue
				}
			}
			p.watches = append(p.watches, w)
		case finalizePart:
			f, err := finalizeOf[T](part)
			if err == nil && p.finalize != nil {
				err = fmt.Errorf("Finalize %q: a controller has one Finalize, and %q came first", part.name, p.finalizerName)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("kube: part %d: %w", i, err))
				continue
			}
			p.finalizerName, p.finalize = part.name, f
		default:
			errs = append(errs, fmt.Errorf("kube: part %d is %T, not one that Owns, Watches or Finalize returns", i, part))
		}
	}
	return p, errors.Join(errs...)
}

// build returns the Controller both constructors describe, or one error
// joining errs and any instrument that can't be created.
func build[T any](s *humus.Setup, cl clients, settings Settings, gvr schema.GroupVersionResource, group, kind string, scope Scope, p parts[T], t objectType[T], errs []error) (*Controller, error) {
	if s == nil {
		errs = append(errs, errors.New("kube: the Setup is nil"))
		s = &humus.Setup{}
	}
	listerCaches, err := newListerCaches(gvr, p.owns, p.watches)
	errs = append(errs, err, checkOwnsSelectShare(settings, p.owns))
	tel, err := newTelemetry(s.Telemetry, settings.Name, settings.ClientGoVerbosity)
	errs = append(errs, err)
	var migration *storagemigration.Migration
	writes := &migrationWrites{}
	if settings.MigrateStorage && tel != nil {
		migration, err = newStorageMigration(tel, settings, gvr, cl, writes)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Controller{
		settings:     settings,
		gvr:          gvr,
		group:        group,
		kind:         kind,
		scope:        scope,
		status:       t.status != nil,
		owns:         p.owns,
		watches:      p.watches,
		listerCaches: listerCaches,
		finalizer:    p.finalizerName,
		clients:      cl,
		tel:          tel,
		migration:    migration,
		done:         make(chan struct{}),
	}
	c.shareSelectors()
	writes.c = c
	t.c = c
	t.fastDecode = objcache.FastDecodable(reflect.TypeFor[T]())
	c.typed = t
	return c, nil
}

// isNil reports whether v is nil, or holds a nil func, pointer, map or
// channel, such as a ReconcilerFunc(nil), which would panic on every
// reconcile.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Interface, reflect.Slice:
		return rv.IsNil()
	}
	return false
}
