package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// The reasons and action of the Warning Event a Controller records on an
// object whose reconcile failed or panicked. Kubernetes' reasons and
// actions are UpperCamelCase, 128 characters at most
// (k8s.io/kubernetes/pkg/apis/events/validation).
const (
	ReasonReconcileFailed   = "ReconcileFailed"
	ReasonReconcilePanicked = "ReconcilePanicked"
	ActionReconcile         = "Reconcile"
)

// noteLimit is the longest note, in bytes, the API server accepts on an
// events.k8s.io/v1 Event (NoteLengthLimit in
// k8s.io/kubernetes/pkg/apis/events/validation); a longer one is cut.
const noteLimit = 1024

// Recorder records Kubernetes Events (events.k8s.io/v1) on the objects of
// one Controller, through client-go's tools/events broadcaster on the
// Controller's Client, as the controller's Settings.Name
// (reportingController). client-go aggregates repeats: an Event with the
// same object, type, reason and action as one recorded in the last 6
// minutes becomes a series whose count grows, sent at most every 30
// minutes, so a failing object doesn't flood the API server. Events are
// sent in the background: recording never blocks and never fails the
// reconcile; an Event the API server refuses is logged.
//
// Events need create and patch on events in the events.k8s.io group, in
// the object's namespace ("default" for a cluster-scoped object): see the
// docs' "The RBAC a Controller needs".
//
// The zero Recorder, and a nil one, record nothing.
type Recorder struct {
	rec        events.EventRecorder
	apiVersion string // the controller's objects', such as cache.example.com/v1alpha1
	kind       string // such as Memcached
	log        *slog.Logger
}

// RecorderFrom returns the Recorder of the controller whose reconcile ctx
// is, as a Reconciler's and a Finalize's context carries it. A context
// that carries none gives a Recorder that records nothing; a unit test's
// from NewReconcileTest gives one whose Events the test reads.
func RecorderFrom(ctx context.Context) *Recorder {
	var r *Recorder
	if s := scopeOf(ctx); s != nil {
		r = s.rec
	}
	return r
}

// Normal records an Event of type Normal on obj: something that went as
// expected, such as a Deployment created. obj is the object the Reconciler
// was handed, an Object of a Resource or a Kind's T, as it is (a pointer
// to one works too); its own apiVersion and kind name it when both are
// set, and otherwise the controller's. reason is why the Event was
// recorded and action what was done, both UpperCamelCase, such as
// "Created" and "Apply"; note says it to a person, such as "created
// Deployment web". A note over 1024 bytes, the API server's limit, is cut.
// An obj that isn't an object is logged and records nothing.
func (r *Recorder) Normal(obj any, reason, action, note string) {
	r.record(obj, corev1.EventTypeNormal, reason, action, note)
}

// Warning records an Event of type Warning on obj: something that needs a
// person's attention, such as an image that can't be pulled. Its
// arguments are Normal's.
func (r *Recorder) Warning(obj any, reason, action, note string) {
	r.record(obj, corev1.EventTypeWarning, reason, action, note)
}

func (r *Recorder) record(obj any, typ, reason, action, note string) {
	if r == nil || r.rec == nil {
		return
	}
	ref, err := r.reference(obj)
	if err != nil {
		r.log.Error("kube: not recording an Event", slog.String("reason", reason), slog.String("error", err.Error()))
		return
	}
	// The note is a format to client-go's recorder: it is passed as an
	// argument, so a % in it is kept.
	r.rec.Eventf(ref, nil, typ, reason, action, "%s", truncateNote(note))
}

// reference names obj for an Event: its own apiVersion and kind when both
// are set, else the controller's, and its namespace, name, uid and
// resourceVersion.
func (r *Recorder) reference(obj any) (*corev1.ObjectReference, error) {
	m, apiVersion, kind, err := objectMeta(obj)
	if err != nil {
		return nil, err
	}
	if apiVersion == "" || kind == "" {
		apiVersion, kind = r.apiVersion, r.kind
	}
	if m.GetName() == "" {
		return nil, fmt.Errorf("kube: the %T to record an Event on has no name", obj)
	}
	return &corev1.ObjectReference{
		APIVersion:      apiVersion,
		Kind:            kind,
		Namespace:       m.GetNamespace(),
		Name:            m.GetName(),
		UID:             m.GetUID(),
		ResourceVersion: m.GetResourceVersion(),
	}, nil
}

// objectMeta returns obj's metadata and its own apiVersion and kind (""
// when unset). obj is a metav1.Object, such as a pointer to a client-go type
// or an *unstructured.Unstructured, or a value whose pointer is one, as a
// Reconciler is handed an Object or a Kind's T by value.
func objectMeta(obj any) (m metav1.Object, apiVersion, kind string, err error) {
	if obj == nil {
		return nil, "", "", errors.New("kube: the object to record an Event on is nil")
	}
	v := reflect.ValueOf(obj)
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, "", "", fmt.Errorf("kube: the %T to record an Event on is nil", obj)
	}
	if v.Kind() != reflect.Pointer {
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		obj = p.Interface()
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, "", "", fmt.Errorf("kube: a %T is not an object: it is no metav1.Object", obj)
	}
	if o, ok := obj.(interface{ GetObjectKind() schema.ObjectKind }); ok {
		gvk := o.GetObjectKind().GroupVersionKind()
		apiVersion, kind = gvk.GroupVersion().String(), gvk.Kind
		if gvk.Version == "" {
			apiVersion = ""
		}
	}
	return m, apiVersion, kind, nil
}

// truncateNote cuts note to the API server's limit, at a rune boundary,
// ending it with "…".
func truncateNote(note string) string {
	if len(note) <= noteLimit {
		return note
	}
	const ellipsis = "…"
	cut := noteLimit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + ellipsis
}

// startEvents starts the controller's Event broadcaster on its Client,
// sending Events with ctx's values (client-go's logger) until the
// returned stop is called, and sets the Recorder every reconcile's context
// carries. Serve calls it before any worker starts, and stop as it
// returns, once the workers are done.
func (c *Controller) startEvents(ctx context.Context) (stop func()) {
	if c.clients.kube == nil {
		return func() {}
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.clients.kube.EventsV1()})
	ctx, cancel := context.WithCancel(ctx)
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		b.Shutdown()
		c.tel.log.Error("kube: not recording Events", slog.String("error", err.Error()))
		return func() {}
	}
	// The scheme is never consulted: every Event names its object by an
	// ObjectReference, which client-go takes as it is.
	rec := b.NewRecorder(runtime.NewScheme(), c.settings.Name).WithLogger(klog.FromContext(ctx))
	c.recorder.Store(&Recorder{
		rec:        rec,
		apiVersion: c.gvr.GroupVersion().String(),
		kind:       c.kind,
		log:        c.tel.log,
	})
	return func() {
		cancel()
		b.Shutdown()
	}
}

// recordFailure records a Warning Event on the object key names, if the
// cache still holds it, saying why its reconcile failed or panicked.
func (c *Controller) recordFailure(lister cache.Indexer, key string, err error, panicked bool) {
	r := c.recorder.Load()
	if r == nil {
		return
	}
	item, exists, lookupErr := lister.GetByKey(key)
	if lookupErr != nil || !exists {
		return
	}
	obj, ok := item.(metav1.Object)
	if !ok {
		return
	}
	reason := ReasonReconcileFailed
	if panicked {
		reason = ReasonReconcilePanicked
	}
	r.Warning(obj, reason, ActionReconcile, err.Error())
}
