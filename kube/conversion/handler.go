package conversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/internal/logattrs"
	"github.com/z5labs/humus/kube/internal/webhookbody"
)

// Path is where a CRD's spec.conversion.webhook.clientConfig sends its
// ConversionReviews by convention, controller-runtime's and kubebuilder's:
// mount the Handler there.
const Path = "/convert"

// MaxRequestBytes bounds a ConversionReview's body. The API server sends
// a list's objects in one review, so it is large: a list of 10,000
// objects of 4 KiB is 40 MiB. A larger body is answered 413.
const MaxRequestBytes = 64 << 20

// maxNamed is how many failed objects a Failed result names, the rest
// counted.
const maxNamed = 10

// scope is the instrumentation scope of the Handler's spans, instruments
// and log records.
const scope = "github.com/z5labs/humus/kube/conversion"

// The outcomes of one object's conversion, the attribute
// humus.kube.conversion.outcome of the conversions counter.
const (
	outcomeConverted = "converted" // converted, or already at the desired version
	outcomeError     = "error"     // the conversion function returned an error
	outcomePanic     = "panic"     // the conversion function panicked
	outcomeMetadata  = "metadata"  // the converted object broke a metadata invariant
	outcomeInvalid   = "invalid"   // the object couldn't be decoded, or has no such kind or version
)

// Handler returns the HTTP handler of a CRD conversion webhook for kinds:
// it answers ConversionReview apiextensions.k8s.io/v1, as the API server
// POSTs it (set the CRD's conversionReviewVersions to [v1]), converting
// each object to the request's desiredAPIVersion through its kind's hub.
// Serve it over TLS with package httpserver, at Path, on every replica,
// leader or not, from the start: the API server calls any replica, and
// the App's own informers need conversion to list.
//
// The answer, 200 with a ConversionReview whose response echoes the
// request's uid, has the converted objects in the request's order, each
// at desiredAPIVersion with its kind; an object already at that version
// is returned as it came. The objects of one request may be of several
// versions. Its result is Failed, with no object, naming each object that
// failed (the first 10, and how many more) by index, kind, namespace and
// name, when:
//
//   - its apiVersion or kind isn't one of kinds', or isn't
//     desiredAPIVersion's group, or it doesn't decode into its version's
//     Go type;
//   - a conversion function returned an error, or panicked, or a Go
//     type's own UnmarshalJSON or MarshalJSON panicked (recovered; the
//     stack is logged, not sent);
//   - the converted object broke an invariant of its metadata, which the
//     API server also checks: its kind (when the function set one), name,
//     namespace and uid unchanged, and no metadata changed but its labels
//     and annotations (the API server would restore them silently).
//
// A request that isn't a POST is 405; a body that isn't application/json
// is 415, larger than MaxRequestBytes 413, or not a ConversionReview v1
// with a request 400, each with a plain-text line saying why.
//
// Each review is a span (ConversionReview, of kind server, a child of the
// caller's trace context as s.Telemetry's Propagator reads it), and
// records two instruments with s.Telemetry's MeterProvider:
// humus.kube.conversion.objects, a counter of objects by kind, from and to
// version, and outcome (converted, error, panic, metadata, invalid); and
// humus.kube.conversion.review.duration, a histogram in seconds by result
// (Success, Failed, or the HTTP status of a refused request). A Failed
// review is logged at WARN with s.Telemetry's LoggerProvider, a panic at
// ERROR with its stack.
//
// It returns one error naming every mistake in kinds (see Kind and
// NewSpoke), and a nil s.
func Handler(s *humus.Setup, kinds ...Registration) (http.Handler, error) {
	byGK, err := compileAll(kinds)
	if s == nil {
		err = errors.Join(err, errors.New("conversion: Handler was given a nil Setup"))
	}
	if err != nil {
		return nil, err
	}
	tel := s.Telemetry.WithNoops()
	m := tel.MeterProvider.Meter(scope)
	objects, err := m.Int64Counter("humus.kube.conversion.objects",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects a conversion webhook converted, or failed to, by kind, from and to version, and outcome."))
	if err != nil {
		return nil, fmt.Errorf("conversion: the instrument humus.kube.conversion.objects: %w", err)
	}
	duration, err := m.Float64Histogram("humus.kube.conversion.review.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long a conversion webhook took to answer a ConversionReview, by result."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	if err != nil {
		return nil, fmt.Errorf("conversion: the instrument humus.kube.conversion.review.duration: %w", err)
	}
	return &handler{
		kinds:      byGK,
		tracer:     tel.TracerProvider.Tracer(scope),
		propagator: tel.Propagator,
		objects:    objects,
		duration:   duration,
		log:        logattrs.NewLogger(scope, tel.LoggerProvider),
	}, nil
}

type handler struct {
	kinds      map[schema.GroupKind]*kind
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	objects    metric.Int64Counter
	duration   metric.Float64Histogram
	log        *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := h.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, "ConversionReview", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	result := h.serve(ctx, span, w, r)
	h.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("humus.kube.conversion.result", result)))
}

// serve answers r, and returns the result the duration is recorded with.
func (h *handler) serve(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) string {
	refuse := func(code int, msg string) string {
		span.SetStatus(codes.Error, msg)
		http.Error(w, "conversion: "+msg, code)
		return fmt.Sprint(code)
	}
	var review apiextensionsv1.ConversionReview
	if code, msg := webhookbody.Read(w, r, MaxRequestBytes, &review, &review.TypeMeta, apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview"), "a",
		"set the CRD's conversionReviewVersions to [v1]"); code != 0 {
		return refuse(code, msg)
	}
	if review.Request == nil {
		return refuse(http.StatusBadRequest, "the ConversionReview has no request")
	}
	req := review.Request
	span.SetAttributes(
		attribute.String("humus.kube.conversion.uid", string(req.UID)),
		attribute.String("humus.kube.conversion.desired_api_version", req.DesiredAPIVersion),
		attribute.Int("humus.kube.conversion.object_count", len(req.Objects)))
	review.Response = h.review(ctx, req)
	review.Request = nil
	if review.Response.Result.Status == metav1.StatusFailure {
		span.SetStatus(codes.Error, review.Response.Result.Message)
		h.log.WarnContext(ctx, "a ConversionReview failed",
			"uid", string(req.UID), "desiredAPIVersion", req.DesiredAPIVersion, "message", review.Response.Result.Message)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&review); err != nil {
		h.log.WarnContext(ctx, "writing a ConversionReview's response", "uid", string(req.UID), "error", err)
	}
	return review.Response.Result.Status
}

// review converts req's objects.
func (h *handler) review(ctx context.Context, req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	fail := func(msg string) *apiextensionsv1.ConversionResponse {
		resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: msg, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity}
		return resp
	}
	if req.UID == "" {
		return fail("the request has no uid")
	}
	desired, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil || desired.Group == "" || desired.Version == "" {
		return fail(fmt.Sprintf("the desiredAPIVersion %q is not group/version: a custom resource's group is never empty", req.DesiredAPIVersion))
	}
	converted := make([]runtime.RawExtension, len(req.Objects))
	var failed []string
	for i, obj := range req.Objects {
		out, err := h.convert(ctx, obj.Raw, desired)
		if err != nil {
			failed = append(failed, fmt.Sprintf("object %d%s", i, err))
			continue
		}
		converted[i] = runtime.RawExtension{Raw: out}
	}
	if len(failed) > 0 {
		msg := strings.Join(failed[:min(len(failed), maxNamed)], "; ")
		if n := len(failed) - maxNamed; n > 0 {
			msg += fmt.Sprintf("; and %d more", n)
		}
		return fail(fmt.Sprintf("converting %d of %d objects to %s failed: %s", len(failed), len(req.Objects), req.DesiredAPIVersion, msg))
	}
	resp.ConvertedObjects = converted
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return resp
}

// objectMeta is the part of an object the Handler reads itself.
type objectMeta struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
}

// convert returns raw, an object, converted to desired. Its error starts
// with the object's kind, namespace and name, to follow "object i".
func (h *handler) convert(ctx context.Context, raw []byte, desired schema.GroupVersion) (out []byte, err error) {
	var in objectMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &in); err != nil {
		h.count(ctx, schema.GroupKind{}, "", desired.Version, outcomeInvalid)
		return nil, fmt.Errorf(": not an object: %v", err)
	}
	name := " (" + in.Kind + " " + in.Metadata.Name + ")"
	if in.Metadata.Namespace != "" {
		name = " (" + in.Kind + " " + in.Metadata.Namespace + "/" + in.Metadata.Name + ")"
	}
	from, err := schema.ParseGroupVersion(in.APIVersion)
	gk := schema.GroupKind{Group: from.Group, Kind: in.Kind}
	outcome := outcomeInvalid
	defer func() {
		// A panic outside the conversion functions, in a Go type's own
		// UnmarshalJSON or MarshalJSON, fails this object as theirs does.
		if r := recover(); r != nil {
			p := &panicError{value: r, stack: debug.Stack()}
			h.log.ErrorContext(ctx, "decoding or encoding an object panicked", "panic", fmt.Sprint(r), "stack", string(p.stack))
			out, err, outcome = nil, fmt.Errorf("%s: decoding or encoding it: %w", name, p), outcomePanic
		}
		h.count(ctx, gk, from.Version, desired.Version, outcome)
	}()
	if err != nil || from.Version == "" {
		return nil, fmt.Errorf("%s: its apiVersion %q is not group/version", name, in.APIVersion)
	}
	if from.Group != desired.Group {
		return nil, fmt.Errorf("%s: its group %s is not desiredAPIVersion's, %s", name, from.Group, desired.Group)
	}
	k := h.kinds[gk]
	if k == nil {
		return nil, fmt.Errorf("%s: no conversion is registered for the kind %s", name, gk)
	}
	src, ok := k.version(from.Version)
	if !ok {
		return nil, fmt.Errorf("%s: its version %s is not one of %s's: %s", name, from.Version, gk, k.known())
	}
	dst, ok := k.version(desired.Version)
	if !ok {
		return nil, fmt.Errorf("%s: desiredAPIVersion's version %s is not one of %s's: %s", name, desired.Version, gk, k.known())
	}
	if from.Version == desired.Version {
		outcome = outcomeConverted
		return raw, nil
	}

	obj := k.newObject(src)
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return nil, fmt.Errorf("%s: decoding it as %s into %s: %v", name, from.Version, k.goType(src), err)
	}
	hub := obj
	if src != nil {
		hub = k.newHub()
		if err := h.call(ctx, src.toHub, obj, hub); err != nil {
			outcome = outcomeOf(err)
			return nil, fmt.Errorf("%s: converting %s to the hub %s: %w", name, from.Version, k.hub, err)
		}
	}
	result := hub
	if dst != nil {
		result = dst.newObject()
		if err := h.call(ctx, dst.fromHub, hub, result); err != nil {
			outcome = outcomeOf(err)
			return nil, fmt.Errorf("%s: converting the hub %s to %s: %w", name, k.hub, desired.Version, err)
		}
	}
	out, err = encode(result, desired.WithKind(in.Kind))
	if err != nil {
		return nil, fmt.Errorf("%s: encoding it as %s: %v", name, desired.Version, err)
	}
	if err := checkMetadata(in, out); err != nil {
		outcome = outcomeMetadata
		return nil, fmt.Errorf("%s: the conversion to %s %w", name, desired.Version, err)
	}
	outcome = outcomeConverted
	return out, nil
}

func (h *handler) count(ctx context.Context, gk schema.GroupKind, from, to, outcome string) {
	h.objects.Add(ctx, 1, metric.WithAttributes(
		attribute.String("humus.kube.conversion.kind", gk.String()),
		attribute.String("humus.kube.conversion.from", from),
		attribute.String("humus.kube.conversion.to", to),
		attribute.String("humus.kube.conversion.outcome", outcome)))
}

// panicError is a conversion function's panic, recovered.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

func outcomeOf(err error) string {
	if _, ok := errors.AsType[*panicError](err); ok {
		return outcomePanic
	}
	return outcomeError
}

// call calls f, with a panic recovered into a *panicError, logged with its
// stack.
func (h *handler) call(ctx context.Context, f convertFunc, src, dst any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p := &panicError{value: r, stack: debug.Stack()}
			h.log.ErrorContext(ctx, "a conversion function panicked", "panic", fmt.Sprint(r), "stack", string(p.stack))
			err = p
		}
	}()
	return f(src, dst)
}

// encode returns obj as JSON, with gvk's apiVersion and kind. An object
// whose Go type embeds metav1.TypeMeta gets them set before it is
// encoded; any other is encoded, decoded and encoded again with them. A
// kind the conversion set other than gvk's is left as it is, for
// checkMetadata to name.
func encode(obj any, gvk schema.GroupVersionKind) ([]byte, error) {
	if o, ok := obj.(interface{ GetObjectKind() schema.ObjectKind }); ok {
		ok := o.GetObjectKind()
		if k := ok.GroupVersionKind().Kind; k != "" && k != gvk.Kind {
			gvk.Kind = k
		}
		ok.SetGroupVersionKind(gvk)
		return json.Marshal(obj)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, &m); err != nil {
		return nil, fmt.Errorf("%T doesn't encode as a JSON object: %w", obj, err)
	}
	m["apiVersion"] = gvk.GroupVersion().String()
	if k, _ := m["kind"].(string); k == "" {
		m["kind"] = gvk.Kind
	}
	return json.Marshal(m)
}

// checkMetadata returns an error naming each change from in to the
// converted object out that the API server doesn't allow: its kind,
// and any metadata but labels and annotations (k8s.io/apiextensions-apiserver's
// webhook converter fails on a changed kind, name, namespace or uid, and
// restores the rest).
func checkMetadata(in objectMeta, out []byte) error {
	var o objectMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(out, &o); err != nil {
		return fmt.Errorf("doesn't decode as an object: %w", err)
	}
	var changed []string
	if o.Kind != in.Kind {
		changed = append(changed, fmt.Sprintf("kind from %q to %q", in.Kind, o.Kind))
	}
	a, b := reflect.ValueOf(in.Metadata), reflect.ValueOf(o.Metadata)
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "labels" || tag == "annotations" {
			continue
		}
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		if equality.Semantic.DeepEqual(x, y) {
			continue
		}
		if a.Field(i).Kind() == reflect.String {
			changed = append(changed, fmt.Sprintf("metadata.%s from %q to %q", tag, x, y))
		} else {
			changed = append(changed, "metadata."+tag)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("changed %s: only the labels and annotations may change (copy the metadata: dst.ObjectMeta = src.ObjectMeta)", strings.Join(changed, ", "))
}
