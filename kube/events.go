package kube

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	kevents "github.com/z5labs/humus/kube/internal/events"
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
	r *kevents.Recorder // nil records nothing (internal/events)
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
	if r != nil {
		r.r.Record(obj, typ, reason, action, note)
	}
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
	r, stop, err := kevents.Start(ctx, c.clients.kube.EventsV1(), c.settings.Name, c.gvr.GroupVersion().String(), c.kind, c.tel.Log())
	if err != nil {
		c.tel.Log().Error("kube: not recording Events", slog.String("error", err.Error()))
		return func() {}
	}
	c.recorder.Store(&Recorder{r: r})
	return stop
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
