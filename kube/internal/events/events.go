// Package events is the plumbing of the Events (events.k8s.io/v1) a
// controller records on its objects: client-go's tools/events broadcaster
// on the controller's client, the ObjectReference an Event names its
// object by, and the note's bound.
//
// It owns Recorder, NewRecorder, Start, ObjectMeta and TruncateNote. Its
// invariants: recording never blocks and never fails the caller (Events
// are sent in the background, and an Event the API server refuses is
// logged); an object names itself by its own apiVersion and kind when
// both are set, else by the controller's; a note is at most the API
// server's 1024 bytes, cut at a rune boundary; a nil Recorder records
// nothing.
package events

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
	eventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// noteLimit is the longest note, in bytes, the API server accepts on an
// events.k8s.io/v1 Event (NoteLengthLimit in
// k8s.io/kubernetes/pkg/apis/events/validation); a longer one is cut.
const noteLimit = 1024

// Recorder records Events on the objects of one controller through
// client-go's EventRecorder, which aggregates repeats and sends them in
// the background.
type Recorder struct {
	rec        events.EventRecorder
	apiVersion string // the controller's objects', such as cache.example.com/v1alpha1
	kind       string // such as Memcached
	log        *slog.Logger
}

// NewRecorder returns a Recorder sending through rec, naming an object
// without its own apiVersion and kind by apiVersion and kind, and logging
// to log an object it can't record an Event on.
func NewRecorder(rec events.EventRecorder, apiVersion, kind string, log *slog.Logger) *Recorder {
	return &Recorder{rec: rec, apiVersion: apiVersion, kind: kind, log: log}
}

// Start starts an Event broadcaster on client, sending Events with ctx's
// values (client-go's logger) until the returned stop is called, and
// returns the Recorder of the controller named controller
// (reportingController), whose objects are apiVersion's kind.
func Start(ctx context.Context, client eventsv1.EventsV1Interface, controller, apiVersion, kind string, log *slog.Logger) (r *Recorder, stop func(), err error) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client})
	ctx, cancel := context.WithCancel(ctx)
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		b.Shutdown()
		return nil, nil, err
	}
	// The scheme is never consulted: every Event names its object by an
	// ObjectReference, which client-go takes as it is.
	rec := b.NewRecorder(runtime.NewScheme(), controller).WithLogger(klog.FromContext(ctx))
	return NewRecorder(rec, apiVersion, kind, log), func() {
		cancel()
		b.Shutdown()
	}, nil
}

// Record records an Event of type typ on obj, with reason, action and
// note cut to the API server's limit; an obj that isn't an object is
// logged and records nothing. A nil Recorder records nothing.
func (r *Recorder) Record(obj any, typ, reason, action, note string) {
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
	r.rec.Eventf(ref, nil, typ, reason, action, "%s", TruncateNote(note))
}

// reference names obj for an Event: its own apiVersion and kind when both
// are set, else the controller's, and its namespace, name, uid and
// resourceVersion.
func (r *Recorder) reference(obj any) (*corev1.ObjectReference, error) {
	m, apiVersion, kind, err := ObjectMeta(obj)
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

// ObjectMeta returns obj's metadata and its own apiVersion and kind (""
// when unset). obj is a metav1.Object, such as a pointer to a client-go type
// or an *unstructured.Unstructured, or a value whose pointer is one, as a
// Reconciler is handed an Object or a Kind's T by value.
func ObjectMeta(obj any) (m metav1.Object, apiVersion, kind string, err error) {
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

// TruncateNote cuts note to the API server's limit, at a rune boundary,
// ending it with "…".
func TruncateNote(note string) string {
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
