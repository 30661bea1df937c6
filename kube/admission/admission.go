// Package admission serves typed validating and defaulting admission
// webhooks: the API server POSTs an AdmissionReview (admission.k8s.io/v1)
// for each write its ValidatingWebhookConfiguration or
// MutatingWebhookConfiguration matches, and Validate's or Default's
// handler answers it with Go functions over the object's own type, as
// controller-runtime's CustomValidator and CustomDefaulter do.
//
// Prefer CEL where it can say the rule: kube's TypeRules put
// x-kubernetes-validations and defaults in the CRD itself, checked by the
// API server with no server of the App's in the path, and
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy cover other
// resources. A webhook is for what CEL can't see, such as another
// object's state, and it makes every write wait for the App: a webhook
// down with failurePolicy Fail refuses them all.
//
// A denial is a 200 whose response has allowed: false and a status naming
// why, never another HTTP status, which the API server would treat as the
// webhook failing (and apply its failurePolicy to). Serve the handlers
// over TLS with package httpserver, beside kube/conversion's.
//
// ValidatingWebhookConfiguration and MutatingWebhookConfiguration build
// the handlers' webhook configurations from the same values (each
// resource's group, version and plural, the operations it has a function
// for), with a Configuration's name, ClientConfig and options, and their
// YAML to check in: no configuration to write by hand, none to keep in
// step with the handler.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/internal/jsondiff"
	"github.com/z5labs/humus/kube/internal/logattrs"
	"github.com/z5labs/humus/kube/internal/webhookbody"
)

// The paths Validate's and Default's handlers are mounted at by
// convention, as a webhook configuration's clientConfig names them.
const (
	ValidatePath = "/validate"
	DefaultPath  = "/default"
)

// MaxRequestBytes bounds an AdmissionReview's body: it holds the object
// and its old version, each at most etcd's 1.5 MiB, with room to spare. A
// larger body is answered 413.
const MaxRequestBytes = 7 << 20

// scope is the instrumentation scope of the handlers' spans, instruments
// and log records.
const scope = "github.com/z5labs/humus/kube/admission"

// Validating validates the objects of one resource, decoded into T, with a
// function per operation: an error denies the request, its message the
// status's, naming what to fix. A nil function allows its operation
// unchecked.
type Validating[T any] struct {
	// Resource is the resource whose writes are validated, as the
	// webhook configuration's rules and AdmissionRequest.resource name it,
	// such as {Group: "cache.example.com", Version: "v1alpha1", Resource:
	// "memcacheds"}. A request for a subresource of it, such as status,
	// is validated as the resource.
	Resource schema.GroupVersionResource

	Create func(ctx context.Context, obj *T) error
	Update func(ctx context.Context, obj, old *T) error
	Delete func(ctx context.Context, old *T) error
}

// Defaulting sets the defaults of one resource's objects, decoded into T,
// on CREATE and UPDATE.
type Defaulting[T any] struct {
	// Resource is as Validating's.
	Resource schema.GroupVersionResource
	// Default sets obj's defaults. The handler answers with a JSON patch
	// of what it changed (obj encoded before and after it), adds and
	// replaces only: a field T lacks is kept, as controller-runtime's
	// defaulter keeps it by default, and so is one Default empties. A
	// list whose elements Default only fills in (every non-zero value of
	// each element unchanged) and perhaps appends to is patched element
	// by element, by index, as controller-runtime patches it, so an
	// element's fields T lacks are kept too. Any other list (shortened,
	// prepended to, reordered, or an element's value changed) is
	// replaced whole, as Default left it: its elements' fields T lacks
	// are then lost, rather than moved onto another element, since
	// nothing else proves which element is which. Numbers are
	// compared and patched exactly, every digit of an int64 or uint64
	// kept. An error denies the request. Required.
	Default func(ctx context.Context, obj *T) error
}

// A ValidatingWebhook is a Validating of any type, as Validate takes it.
type ValidatingWebhook interface {
	validating() (schema.GroupVersionResource, admitFunc, error)
}

// A DefaultingWebhook is a Defaulting of any type, as Default takes it.
type DefaultingWebhook interface {
	defaulting() (schema.GroupVersionResource, admitFunc, error)
}

// admitFunc answers one request for its resource: a patch (defaulting
// only), or an error that denies it.
type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) (patch []byte, err error)

// denied is an error that denies a request for a reason of its own, with
// code as its status's.
type denied struct {
	code int32
	err  error
}

func (d *denied) Error() string { return d.err.Error() }
func (d *denied) Unwrap() error { return d.err }

func checkGVR(gvr schema.GroupVersionResource) []error {
	var errs []error
	if gvr.Version == "" {
		errs = append(errs, errors.New("Resource.Version is empty"))
	}
	if gvr.Resource == "" {
		errs = append(errs, errors.New("Resource.Resource is empty: the plural resource name, such as memcacheds"))
	}
	return errs
}

func (v Validating[T]) validating() (schema.GroupVersionResource, admitFunc, error) {
	errs := checkGVR(v.Resource)
	if v.Create == nil && v.Update == nil && v.Delete == nil {
		errs = append(errs, errors.New("no function: set Create, Update or Delete"))
	}
	return v.Resource, func(ctx context.Context, req *admissionv1.AdmissionRequest) ([]byte, error) {
		switch req.Operation {
		case admissionv1.Create:
			if v.Create == nil {
				return nil, nil
			}
			obj, err := decode[T](req.Object.Raw, "object")
			if err != nil {
				return nil, err
			}
			return nil, call(func() error { return v.Create(ctx, obj) })
		case admissionv1.Update:
			if v.Update == nil {
				return nil, nil
			}
			obj, err := decode[T](req.Object.Raw, "object")
			if err != nil {
				return nil, err
			}
			old, err := decode[T](req.OldObject.Raw, "oldObject")
			if err != nil {
				return nil, err
			}
			return nil, call(func() error { return v.Update(ctx, obj, old) })
		case admissionv1.Delete:
			if v.Delete == nil {
				return nil, nil
			}
			old, err := decode[T](req.OldObject.Raw, "oldObject")
			if err != nil {
				return nil, err
			}
			return nil, call(func() error { return v.Delete(ctx, old) })
		}
		return nil, nil
	}, errors.Join(errs...)
}

func (d Defaulting[T]) defaulting() (schema.GroupVersionResource, admitFunc, error) {
	errs := checkGVR(d.Resource)
	if d.Default == nil {
		errs = append(errs, errors.New("Default is nil"))
	}
	return d.Resource, func(ctx context.Context, req *admissionv1.AdmissionRequest) ([]byte, error) {
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return nil, nil
		}
		obj, err := decode[T](req.Object.Raw, "object")
		if err != nil {
			return nil, err
		}
		before, err := json.Marshal(obj)
		if err != nil {
			return nil, &denied{code: http.StatusInternalServerError, err: fmt.Errorf("encoding the object: %w", err)}
		}
		if err := call(func() error { return d.Default(ctx, obj) }); err != nil {
			return nil, err
		}
		after, err := json.Marshal(obj)
		if err != nil {
			return nil, &denied{code: http.StatusInternalServerError, err: fmt.Errorf("encoding the defaulted object: %w", err)}
		}
		return patch(req.Object.Raw, before, after)
	}, errors.Join(errs...)
}

// decode returns raw, the request's field named what, decoded into a new T.
func decode[T any](raw []byte, what string) (*T, error) {
	obj := new(T)
	if len(raw) == 0 {
		return nil, &denied{code: http.StatusBadRequest, err: fmt.Errorf("the request has no %s", what)}
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return nil, &denied{code: http.StatusBadRequest, err: fmt.Errorf("decoding the %s into %T: %w", what, obj, err)}
	}
	return obj, nil
}

// panicked is a webhook function's panic, recovered.
type panicked struct {
	value any
	stack []byte
}

func (p *panicked) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// call calls f, with a panic recovered into a *panicked.
func call(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicked{value: r, stack: debug.Stack()}
		}
	}()
	return f()
}

// Validate returns the handler of a validating admission webhook for vs,
// each request answered by the Validating of its resource. It returns one
// error naming every mistake in vs (a Resource without version or
// resource, no function, a resource given twice), and a nil s.
func Validate(s *humus.Setup, vs ...ValidatingWebhook) (http.Handler, error) {
	byGVR := map[schema.GroupVersionResource]admitFunc{}
	var errs []error
	for i, v := range vs {
		if v == nil {
			errs = append(errs, fmt.Errorf("admission: Validating %d is nil", i))
			continue
		}
		gvr, f, err := v.validating()
		errs = append(errs, register(byGVR, "Validating", i, gvr, f, err))
	}
	return newHandler(s, "validating", byGVR, errors.Join(errs...))
}

// Default returns the handler of a mutating admission webhook for ds,
// each CREATE and UPDATE answered with the JSON patch of the Defaulting
// of its resource. It returns one error naming every mistake in ds, and a
// nil s.
func Default(s *humus.Setup, ds ...DefaultingWebhook) (http.Handler, error) {
	byGVR := map[schema.GroupVersionResource]admitFunc{}
	var errs []error
	for i, d := range ds {
		if d == nil {
			errs = append(errs, fmt.Errorf("admission: Defaulting %d is nil", i))
			continue
		}
		gvr, f, err := d.defaulting()
		errs = append(errs, register(byGVR, "Defaulting", i, gvr, f, err))
	}
	return newHandler(s, "defaulting", byGVR, errors.Join(errs...))
}

func register(byGVR map[schema.GroupVersionResource]admitFunc, what string, i int, gvr schema.GroupVersionResource, f admitFunc, err error) error {
	var errs []error
	if err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("admission: %s %d (%s): %w", what, i, gvr, e))
		}
	}
	if _, ok := byGVR[gvr]; ok {
		errs = append(errs, fmt.Errorf("admission: %s %d (%s): the resource is given twice: one function per resource and operation", what, i, gvr))
	}
	byGVR[gvr] = f
	return errors.Join(errs...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func newHandler(s *humus.Setup, kind string, byGVR map[schema.GroupVersionResource]admitFunc, err error) (http.Handler, error) {
	if len(byGVR) == 0 && err == nil {
		err = fmt.Errorf("admission: no %s webhook was given", kind)
	}
	if s == nil {
		err = errors.Join(err, errors.New("admission: a nil Setup"))
	}
	if err != nil {
		return nil, err
	}
	tel := s.Telemetry.WithNoops()
	m := tel.MeterProvider.Meter(scope)
	reviews, err := m.Int64Counter("humus.kube.admission.reviews",
		metric.WithUnit("{review}"),
		metric.WithDescription("AdmissionReviews an admission webhook answered, by webhook kind, resource, operation and outcome."))
	if err != nil {
		return nil, fmt.Errorf("admission: the instrument humus.kube.admission.reviews: %w", err)
	}
	duration, err := m.Float64Histogram("humus.kube.admission.review.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long an admission webhook took to answer an AdmissionReview, by webhook kind and outcome."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	if err != nil {
		return nil, fmt.Errorf("admission: the instrument humus.kube.admission.review.duration: %w", err)
	}
	return &handler{
		kind:       kind,
		byGVR:      byGVR,
		tracer:     tel.TracerProvider.Tracer(scope),
		propagator: tel.Propagator,
		reviews:    reviews,
		duration:   duration,
		log:        logattrs.NewLogger(scope, tel.LoggerProvider),
	}, nil
}

type handler struct {
	kind       string // validating or defaulting
	byGVR      map[schema.GroupVersionResource]admitFunc
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	reviews    metric.Int64Counter
	duration   metric.Float64Histogram
	log        *slog.Logger
}

// The outcomes of a review, the attribute humus.kube.admission.outcome.
const (
	outcomeAllowed = "allowed"
	outcomeDenied  = "denied" // the function returned an error
	outcomeError   = "error"  // the request couldn't be answered: undecodable, unknown resource, a panic
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := h.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, "AdmissionReview", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("humus.kube.admission.webhook", h.kind)))
	defer span.End()
	outcome := h.serve(ctx, span, w, r)
	h.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
		attribute.String("humus.kube.admission.webhook", h.kind),
		attribute.String("humus.kube.admission.outcome", outcome)))
}

func (h *handler) serve(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) string {
	refuse := func(code int, msg string) string {
		span.SetStatus(codes.Error, msg)
		http.Error(w, "admission: "+msg, code)
		return fmt.Sprint(code)
	}
	var review admissionv1.AdmissionReview
	if code, msg := webhookbody.Read(w, r, MaxRequestBytes, &review, &review.TypeMeta, admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"), "an",
		"set the webhook's admissionReviewVersions to [v1]"); code != 0 {
		return refuse(code, msg)
	}
	req := review.Request
	if req == nil || req.UID == "" {
		return refuse(http.StatusBadRequest, "the AdmissionReview has no request, or its request no uid")
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	span.SetAttributes(
		attribute.String("humus.kube.admission.uid", string(req.UID)),
		attribute.String("humus.kube.admission.resource", gvr.String()),
		attribute.String("humus.kube.admission.operation", string(req.Operation)),
		attribute.String("humus.kube.admission.namespace", req.Namespace),
		attribute.String("humus.kube.admission.name", req.Name))
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	outcome := outcomeAllowed
	var p []byte
	var err error
	f, ok := h.byGVR[gvr]
	if ok {
		// call recovers a panic outside the webhook's function too, in
		// the Go type's own UnmarshalJSON or MarshalJSON.
		err = call(func() (err error) {
			p, err = f(ctx, req)
			return err
		})
	} else {
		err = &denied{code: http.StatusInternalServerError, err: fmt.Errorf("no %s webhook is registered for the resource %s: check the webhook configuration's rules", h.kind, gvr)}
	}
	if err != nil {
		resp.Allowed = false
		code, reason := int32(http.StatusForbidden), metav1.StatusReasonForbidden
		outcome = outcomeDenied
		if d, ok := errors.AsType[*denied](err); ok {
			code, reason, outcome = d.code, metav1.StatusReasonInternalError, outcomeError
			if d.code == http.StatusBadRequest {
				reason = metav1.StatusReasonBadRequest
			}
		}
		if pn, ok := errors.AsType[*panicked](err); ok {
			code, reason, outcome = http.StatusInternalServerError, metav1.StatusReasonInternalError, outcomeError
			h.log.ErrorContext(ctx, "an admission function panicked", "resource", gvr.String(), "operation", string(req.Operation),
				"namespace", req.Namespace, "name", req.Name, "panic", fmt.Sprint(pn.value), "stack", string(pn.stack))
		}
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: reason, Code: code}
		span.SetStatus(codes.Error, err.Error())
	} else if len(p) > 0 {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = p, &pt
	}
	h.reviews.Add(ctx, 1, metric.WithAttributes(
		attribute.String("humus.kube.admission.webhook", h.kind),
		attribute.String("humus.kube.admission.resource", gvr.String()),
		attribute.String("humus.kube.admission.operation", string(req.Operation)),
		attribute.String("humus.kube.admission.outcome", outcome)))
	review.Request, review.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&review); err != nil {
		h.log.WarnContext(ctx, "writing an AdmissionReview's response", "uid", string(req.UID), "error", err)
	}
	return outcome
}

// op is one operation of a JSON patch (RFC 6902).
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch returns the JSON patch, against the object as it came (raw),
// of what Default changed: the difference between before and after, obj
// encoded before and after Default, as an add of each key after has and
// before hasn't, and a replace of each value that differs, never a
// removal. A list whose elements Default only filled in (filledIn) is
// diffed element by element, by index, with an add of each element
// Default appended; any other is replaced whole. Diffing the two
// encodings rather than raw and after keeps out what encoding alone
// changes: a field T lacks, which would be removed, and a zero value T
// writes, which would be added. nil when Default changed nothing.
func patch(raw, before, after []byte) ([]byte, error) {
	var o, b, a any
	for _, d := range []struct {
		data []byte
		v    *any
		what string
	}{{raw, &o, "object"}, {before, &b, "decoded object"}, {after, &a, "defaulted object"}} {
		// Numbers as their text (jsondiff.Decode), compared exactly and
		// patched with every digit.
		v, err := jsondiff.Decode(d.data)
		if err != nil {
			return nil, &denied{code: http.StatusInternalServerError, err: fmt.Errorf("decoding the %s: %w", d.what, err)}
		}
		*d.v = v
	}
	var ops []op
	diff("", o, b, a, &ops)
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// diff appends to ops what Default changed at path, from before b to
// after a, as operations on o, the object as it came.
func diff(path string, o, b, a any, ops *[]op) {
	if jsondiff.Equal(b, a) || a == nil {
		return // unchanged, or emptied: no removal
	}
	if ol, ok := o.([]any); ok {
		// A list whose elements Default only filled in, and perhaps
		// appended to, is diffed element by element, by index, as
		// controller-runtime's defaulter's patch (gomodules.xyz/jsonpatch)
		// diffs it, so that an element's fields T lacks are kept. Any
		// other list (one Default shortened, prepended to, reordered, or
		// whose elements' values it changed) is replaced whole, since no
		// index is then known to hold the same element before and after:
		// its elements' fields T lacks are lost, never moved onto another
		// element. Without the schema's list-map keys nothing better
		// names an element.
		bl, bok := b.([]any)
		al, aok := a.([]any)
		_, came := jsondiff.Pair(ol, bl, nil, jsondiff.ByIndex)
		if bok && aok && came && filledIn(bl, al) {
			for i := range bl {
				diff(fmt.Sprintf("%s/%d", path, i), ol[i], bl[i], al[i], ops)
			}
			for _, v := range al[len(bl):] {
				*ops = append(*ops, op{Op: "add", Path: path + "/-", Value: v})
			}
			return
		}
	}
	om, ook := o.(map[string]any)
	bm, _ := b.(map[string]any)
	am, aok := a.(map[string]any)
	if !ook || !aok {
		*ops = append(*ops, op{Op: "replace", Path: path, Value: a})
		return
	}
	keys := make([]string, 0, len(am))
	for k := range am {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if jsondiff.Equal(bm[k], am[k]) {
			continue
		}
		p := jsondiff.Pointer(path, k)
		if ov, ok := om[k]; ok {
			diff(p, ov, bm[k], am[k], ops)
		} else {
			*ops = append(*ops, op{Op: "add", Path: p, Value: am[k]})
		}
	}
}

// filledIn reports whether al, a list after Default, is bl, the list
// before, with its elements only filled in and perhaps elements appended:
// al is no shorter, and every value of each bl[i] that isn't zero (null,
// "", false, 0, {} or []) is unchanged in al[i], objects compared key by
// key and lists as filledIn compares them. Then al[i] is provably bl[i] defaulted, and the two pair by index
// (a proof jsondiff.Pair's Appended, looking at lengths only, leaves to
// its caller).
func filledIn(bl, al []any) bool {
	if len(al) < len(bl) {
		return false
	}
	for i := range bl {
		if !kept(bl[i], al[i]) {
			return false
		}
	}
	return true
}

// kept reports whether every non-zero value of b is unchanged in a.
func kept(b, a any) bool {
	switch bv := b.(type) {
	case nil:
		return true
	case string:
		if bv == "" {
			return true
		}
	case bool:
		if !bv {
			return true
		}
	case []any:
		al, ok := a.([]any)
		return len(bv) == 0 || ok && filledIn(bv, al)
	case map[string]any:
		am, ok := a.(map[string]any)
		if len(bv) == 0 {
			return true
		}
		if !ok {
			return false
		}
		for k, v := range bv {
			if !kept(v, am[k]) {
				return false
			}
		}
		return true
	default:
		if jsondiff.Equal(b, 0) {
			return true
		}
	}
	return jsondiff.Equal(b, a)
}
