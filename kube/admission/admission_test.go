package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/admission"
)

type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Size     int    `json:"size"`
		Image    string `json:"image,omitempty"`
		Paused   bool   `json:"paused"`
		Template struct {
			Labels map[string]string `json:"labels,omitempty"`
		} `json:"template"`
	} `json:"spec"`
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// review is an AdmissionReview as the API server sends it.
func review(op, object, oldObject string) string {
	r := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"0df28fbd-5f5f-11e8-b2ec-42010a800002",` +
		`"kind":{"group":"example.com","version":"v1","kind":"Widget"},"resource":{"group":"example.com","version":"v1","resource":"widgets"},` +
		`"requestKind":{"group":"example.com","version":"v1","kind":"Widget"},"requestResource":{"group":"example.com","version":"v1","resource":"widgets"},` +
		`"name":"w","namespace":"default","operation":"` + op + `","userInfo":{"username":"admin","groups":["system:authenticated"]}`
	if object != "" {
		r += `,"object":` + object
	}
	if oldObject != "" {
		r += `,"oldObject":` + oldObject
	}
	return r + `,"dryRun":false}}`
}

func widget(spec string) string {
	return `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default","uid":"u1"},"spec":` + spec + `,"extra":{"kept":true}}`
}

func answer(t *testing.T, h http.Handler, body string) *admissionv1.AdmissionResponse {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, admission.ValidatePath, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, "a denial is a 200 too: %s", w.Body.String())
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
	require.Equal(t, "admission.k8s.io/v1", out.APIVersion)
	require.Equal(t, "AdmissionReview", out.Kind)
	require.Equal(t, "0df28fbd-5f5f-11e8-b2ec-42010a800002", string(out.Response.UID))
	return out.Response
}

func validator(t *testing.T, tel *humustest.Telemetry) http.Handler {
	s := &humus.Setup{}
	if tel != nil {
		s.Telemetry = tel.Telemetry
	}
	h, err := admission.Validate(s, admission.Validating[Widget]{
		Resource: widgets,
		Create: func(ctx context.Context, w *Widget) error {
			if w.Spec.Image == "panic" {
				panic("boom")
			}
			if w.Spec.Size > 10 {
				return errors.New("spec.size is more than 10, the namespace's quota")
			}
			return nil
		},
		Update: func(ctx context.Context, w, old *Widget) error {
			if w.Spec.Image != old.Spec.Image && old.Spec.Paused {
				return errors.New("spec.image can't change while the widget is paused")
			}
			return nil
		},
	})
	require.NoError(t, err)
	return h
}

func TestAValidatingWebhookAllowsOrDeniesWithA200(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	h := validator(t, tel)
	resp := answer(t, h, review("CREATE", widget(`{"size":3}`), ""))
	require.True(t, resp.Allowed)
	require.Nil(t, resp.Result)

	resp = answer(t, h, review("CREATE", widget(`{"size":30}`), ""))
	require.False(t, resp.Allowed)
	require.Equal(t, &metav1.Status{Status: metav1.StatusFailure, Message: "spec.size is more than 10, the namespace's quota",
		Reason: metav1.StatusReasonForbidden, Code: 403}, resp.Result)

	resp = answer(t, h, review("UPDATE", widget(`{"size":1,"image":"b"}`), widget(`{"size":1,"image":"a","paused":true}`)))
	require.False(t, resp.Allowed, "the old object reaches Update")
	require.Equal(t, "spec.image can't change while the widget is paused", resp.Result.Message)

	resp = answer(t, h, review("DELETE", "", widget(`{"size":1}`)))
	require.True(t, resp.Allowed, "no Delete function: allowed")

	resp = answer(t, h, review("CREATE", widget(`{"size":1,"image":"panic"}`), ""))
	require.False(t, resp.Allowed)
	require.Equal(t, int32(500), resp.Result.Code)
	require.Equal(t, "panic: boom", resp.Result.Message)

	resp = answer(t, h, review("CREATE", widget(`{"size":"three"}`), ""))
	require.False(t, resp.Allowed)
	require.Equal(t, int32(400), resp.Result.Code)
	require.Contains(t, resp.Result.Message, "decoding the object into *admission_test.Widget: json: cannot unmarshal string")

	resp = answer(t, h, strings.Replace(review("CREATE", widget(`{}`), ""), `"resource":"widgets"},"requestKind"`, `"resource":"gadgets"},"requestKind"`, 1))
	require.False(t, resp.Allowed)
	require.Equal(t, "no validating webhook is registered for the resource example.com/v1, Resource=gadgets: check the webhook configuration's rules", resp.Result.Message)

	outcomes := map[string]int64{}
	m, ok := tel.Metric("github.com/z5labs/humus/kube/admission", "humus.kube.admission.reviews")
	require.True(t, ok)
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		op, _ := dp.Attributes.Value("humus.kube.admission.operation")
		outcome, _ := dp.Attributes.Value("humus.kube.admission.outcome")
		outcomes[op.AsString()+" "+outcome.AsString()] += dp.Value
	}
	require.Equal(t, map[string]int64{"CREATE allowed": 1, "CREATE denied": 1, "UPDATE denied": 1, "DELETE allowed": 1, "CREATE error": 3}, outcomes)
	require.Len(t, tel.Spans(), 7, "a span per review")
	var panics int
	for _, r := range tel.Records() {
		if r.Body().AsString() == "an admission function panicked" {
			panics++
		}
	}
	require.Equal(t, 1, panics)
}

func TestADefaultingWebhookAnswersAJSONPatchThatKeepsUnknownFields(t *testing.T) {
	h, err := admission.Default(&humus.Setup{}, admission.Defaulting[Widget]{
		Resource: widgets,
		Default: func(ctx context.Context, w *Widget) error {
			if w.Spec.Image == "" {
				w.Spec.Image = "memcached:1.6"
			}
			if w.Spec.Size == 0 {
				w.Spec.Size = 1
			}
			if w.Labels == nil {
				w.Labels = map[string]string{}
			}
			w.Labels["app.kubernetes.io/name"] = "widget"
			return nil
		},
	})
	require.NoError(t, err)
	resp := answer(t, h, review("CREATE", widget(`{"size":0,"paused":false}`), ""))
	require.True(t, resp.Allowed)
	require.Equal(t, admissionv1.PatchTypeJSONPatch, *resp.PatchType)
	require.JSONEq(t, `[
		{"op":"add","path":"/metadata/labels","value":{"app.kubernetes.io/name":"widget"}},
		{"op":"add","path":"/spec/image","value":"memcached:1.6"},
		{"op":"replace","path":"/spec/size","value":1}
	]`, string(resp.Patch), "no removal of extra, which Widget lacks, nor an add of the empty template it writes")
	// The patch applies as the API server applies it, with evanphx/json-patch.
	p, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err)
	patched, err := p.Apply([]byte(widget(`{"size":0,"paused":false}`)))
	require.NoError(t, err)
	require.JSONEq(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default","uid":"u1","labels":{"app.kubernetes.io/name":"widget"}},`+
		`"spec":{"size":1,"paused":false,"image":"memcached:1.6"},"extra":{"kept":true}}`, string(patched))

	resp = answer(t, h, review("CREATE", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`, ""))
	require.True(t, resp.Allowed)
	p, err = jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err)
	patched, err = p.Apply([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`))
	require.NoError(t, err, "an object with no spec gets one: %s", resp.Patch)
	require.JSONEq(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","labels":{"app.kubernetes.io/name":"widget"}},`+
		`"spec":{"size":1,"image":"memcached:1.6","paused":false,"template":{}}}`, string(patched))

	resp = answer(t, h, review("CREATE", widget(`{"size":2,"image":"x","paused":false,"template":{}}`)[:0]+
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","labels":{"app.kubernetes.io/name":"widget"}},"spec":{"size":2,"image":"x","paused":false,"template":{}}}`, ""))
	require.True(t, resp.Allowed)
	require.Nil(t, resp.Patch, "nothing to default, no patch")
	require.Nil(t, resp.PatchType)

	resp = answer(t, h, review("DELETE", "", widget(`{}`)))
	require.True(t, resp.Allowed)
	require.Nil(t, resp.Patch, "DELETE isn't defaulted")
}

func TestAdmissionNamesEveryMistake(t *testing.T) {
	_, err := admission.Validate(nil,
		admission.Validating[Widget]{},
		admission.Validating[Widget]{Resource: widgets, Create: func(context.Context, *Widget) error { return nil }},
		admission.Validating[Widget]{Resource: widgets, Delete: func(context.Context, *Widget) error { return nil }},
	)
	require.EqualError(t, err, ""+
		"admission: Validating 0 (/, Resource=): Resource.Version is empty\n"+
		"admission: Validating 0 (/, Resource=): Resource.Resource is empty: the plural resource name, such as memcacheds\n"+
		"admission: Validating 0 (/, Resource=): no function: set Create, Update or Delete\n"+
		"admission: Validating 2 (example.com/v1, Resource=widgets): the resource is given twice: one function per resource and operation\n"+
		"admission: a nil Setup")
	_, err = admission.Default(&humus.Setup{}, admission.Defaulting[Widget]{Resource: widgets})
	require.EqualError(t, err, "admission: Defaulting 0 (example.com/v1, Resource=widgets): Default is nil")
	_, err = admission.Default(&humus.Setup{})
	require.EqualError(t, err, "admission: no defaulting webhook was given")
}

func TestABadAdmissionRequestIsAnsweredWithAClearError(t *testing.T) {
	h := validator(t, nil)
	for _, tc := range []struct {
		body string
		code int
		msg  string
	}{
		{`{`, 400, "admission: the body is no AdmissionReview: unexpected end of JSON input\n"},
		{`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"x"}}`, 400,
			`admission: the body is a "AdmissionReview" of apiVersion "admission.k8s.io/v1beta1", not an AdmissionReview of admission.k8s.io/v1: set the webhook's admissionReviewVersions to [v1]` + "\n"},
		{`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}`, 400, "admission: the AdmissionReview has no request, or its request no uid\n"},
	} {
		r := httptest.NewRequest(http.MethodPost, admission.ValidatePath, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, tc.code, w.Code)
		require.Equal(t, tc.msg, w.Body.String())
	}
}
