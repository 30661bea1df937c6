package conversion_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/conversion"
)

// Three versions of a Widget: v2 is the hub; v1 has a size where v2 has
// replicas, and v3 splits v2's image into a repository and a tag.
type (
	WidgetV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Size  int    `json:"size"`
			Image string `json:"image"`
		} `json:"spec"`
	}
	WidgetV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Replicas int    `json:"replicas"`
			Image    string `json:"image"`
		} `json:"spec"`
	}
	WidgetV3 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Replicas   int    `json:"replicas"`
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"spec"`
	}
)

func v1ToV2(src *WidgetV1, dst *WidgetV2) error {
	if src.Spec.Size < 0 {
		return fmt.Errorf("spec.size %d is negative", src.Spec.Size)
	}
	if src.Spec.Image == "panic" {
		panic("an image named panic")
	}
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Replicas, dst.Spec.Image = src.Spec.Size, src.Spec.Image
	return nil
}

func v2ToV1(src *WidgetV2, dst *WidgetV1) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Size, dst.Spec.Image = src.Spec.Replicas, src.Spec.Image
	return nil
}

func v3ToV2(src *WidgetV3, dst *WidgetV2) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Replicas, dst.Spec.Image = src.Spec.Replicas, src.Spec.Repository+":"+src.Spec.Tag
	return nil
}

func v2ToV3(src *WidgetV2, dst *WidgetV3) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Replicas = src.Spec.Replicas
	dst.Spec.Repository, dst.Spec.Tag, _ = strings.Cut(src.Spec.Image, ":")
	switch src.Name {
	case "renamed":
		dst.Name = "other"
	case "forgetful":
		dst.ObjectMeta = metav1.ObjectMeta{}
	case "labelled":
		dst.Labels = map[string]string{"converted": "true"}
		dst.Generation = 7
	}
	return nil
}

func widgets() conversion.Kind[WidgetV2] {
	return conversion.Kind[WidgetV2]{
		Group: "example.com", Kind: "Widget", Hub: "v2",
		Spokes: []conversion.Spoke[WidgetV2]{
			conversion.NewSpoke("v1", v1ToV2, v2ToV1),
			conversion.NewSpoke("v3", v3ToV2, v2ToV3),
		},
	}
}

// review is a ConversionReview as the API server sends it.
func review(desired string, objects ...string) string {
	return `{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","desiredAPIVersion":"` +
		desired + `","objects":[` + strings.Join(objects, ",") + `]}}`
}

func widget(version, name, spec string) string {
	return `{"apiVersion":"example.com/` + version + `","kind":"Widget","metadata":{"name":"` + name + `","namespace":"default","uid":"uid-` + name +
		`","resourceVersion":"42","generation":3,"creationTimestamp":"2026-12-01T10:00:00Z","labels":{"app":"w"}},"spec":` + spec + `}`
}

func newHandler(t *testing.T, tel *humustest.Telemetry) http.Handler {
	s := &humus.Setup{}
	if tel != nil {
		s.Telemetry = tel.Telemetry
	}
	h, err := conversion.Handler(s, widgets())
	require.NoError(t, err)
	return h
}

// post sends body to h and returns the status and the answer.
func post(t *testing.T, h http.Handler, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, conversion.Path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func answer(t *testing.T, h http.Handler, body string) *apiextensionsv1.ConversionResponse {
	t.Helper()
	code, out := post(t, h, body)
	require.Equal(t, http.StatusOK, code, out)
	var r apiextensionsv1.ConversionReview
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "apiextensions.k8s.io/v1", r.APIVersion)
	require.Equal(t, "ConversionReview", r.Kind)
	require.Nil(t, r.Request)
	require.NotNil(t, r.Response)
	require.Equal(t, "705ab4f5-6393-11e8-b7cc-42010a800002", string(r.Response.UID), "the request's uid, echoed")
	return r.Response
}

func TestAReviewOfMixedVersionsIsConvertedInOrderThroughTheHub(t *testing.T) {
	h := newHandler(t, nil)
	resp := answer(t, h, review("example.com/v3",
		widget("v1", "a", `{"size":2,"image":"memcached:1.6"}`),
		widget("v2", "b", `{"replicas":3,"image":"memcached:1.5"}`),
		widget("v3", "c", `{"replicas":4,"repository":"memcached","tag":"1.4"}`),
	))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	require.Len(t, resp.ConvertedObjects, 3)
	want := []string{
		widget("v3", "a", `{"replicas":2,"repository":"memcached","tag":"1.6"}`),
		widget("v3", "b", `{"replicas":3,"repository":"memcached","tag":"1.5"}`),
		widget("v3", "c", `{"replicas":4,"repository":"memcached","tag":"1.4"}`),
	}
	for i, o := range resp.ConvertedObjects {
		require.JSONEq(t, want[i], string(o.Raw), "object %d", i)
	}

	resp = answer(t, h, review("example.com/v1", widget("v3", "c", `{"replicas":4,"repository":"memcached","tag":"1.4"}`)))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	require.JSONEq(t, widget("v1", "c", `{"size":4,"image":"memcached:1.4"}`), string(resp.ConvertedObjects[0].Raw), "spoke to spoke")

	resp = answer(t, h, review("example.com/v2"))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, "no object, nothing to convert")
	require.Empty(t, resp.ConvertedObjects)
}

func TestAPanicOrAnErrorInAConversionFailsTheReviewNamingEachObject(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	h := newHandler(t, tel)
	resp := answer(t, h, review("example.com/v2",
		widget("v1", "fine", `{"size":1,"image":"x"}`),
		widget("v1", "boom", `{"size":1,"image":"panic"}`),
		widget("v1", "negative", `{"size":-1,"image":"x"}`),
	))
	require.Equal(t, metav1.StatusFailure, resp.Result.Status)
	require.Empty(t, resp.ConvertedObjects)
	require.Equal(t, "converting 2 of 3 objects to example.com/v2 failed: "+
		"object 1 (Widget default/boom): converting v1 to the hub v2: panic: an image named panic; "+
		"object 2 (Widget default/negative): converting v1 to the hub v2: spec.size -1 is negative", resp.Result.Message)

	var logged []string
	for _, r := range tel.Records() {
		logged = append(logged, r.Severity().String()+" "+r.Body().AsString())
	}
	require.Equal(t, []string{"ERROR a conversion function panicked", "WARN a ConversionReview failed"}, logged)
	// Each attribute reaches the OTel log bridge as what it is: the uid a
	// string, not "unhandled: (types.UID) …".
	for _, r := range tel.Records() {
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			require.NotContains(t, kv.Value.Emit(), "unhandled", "attribute %s of %q", kv.Key, r.Body().AsString())
			if kv.Key == "uid" {
				require.Equal(t, attribute.STRING, kv.Value.Type())
				require.Equal(t, "705ab4f5-6393-11e8-b7cc-42010a800002", kv.Value.AsString())
			}
			return true
		})
	}

	counts := map[string]int64{}
	m, ok := tel.Metric("github.com/z5labs/humus/kube/conversion", "humus.kube.conversion.objects")
	require.True(t, ok)
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		from, _ := dp.Attributes.Value("humus.kube.conversion.from")
		to, _ := dp.Attributes.Value("humus.kube.conversion.to")
		outcome, _ := dp.Attributes.Value("humus.kube.conversion.outcome")
		counts[from.AsString()+">"+to.AsString()+" "+outcome.AsString()] += dp.Value
	}
	require.Equal(t, map[string]int64{"v1>v2 converted": 1, "v1>v2 panic": 1, "v1>v2 error": 1}, counts)
}

func TestAConversionMayChangeOnlyLabelsAndAnnotations(t *testing.T) {
	h := newHandler(t, nil)
	resp := answer(t, h, review("example.com/v3",
		widget("v2", "renamed", `{"replicas":1,"image":"a:1"}`),
		widget("v2", "forgetful", `{"replicas":1,"image":"a:1"}`),
		widget("v2", "labelled", `{"replicas":1,"image":"a:1"}`),
	))
	require.Equal(t, metav1.StatusFailure, resp.Result.Status)
	require.Equal(t, "converting 3 of 3 objects to example.com/v3 failed: "+
		`object 0 (Widget default/renamed): the conversion to v3 changed metadata.name from "renamed" to "other": only the labels and annotations may change (copy the metadata: dst.ObjectMeta = src.ObjectMeta); `+
		`object 1 (Widget default/forgetful): the conversion to v3 changed metadata.name from "forgetful" to "", metadata.namespace from "default" to "", metadata.uid from "uid-forgetful" to "", metadata.resourceVersion from "42" to "", metadata.generation, metadata.creationTimestamp: only the labels and annotations may change (copy the metadata: dst.ObjectMeta = src.ObjectMeta); `+
		`object 2 (Widget default/labelled): the conversion to v3 changed metadata.generation: only the labels and annotations may change (copy the metadata: dst.ObjectMeta = src.ObjectMeta)`,
		resp.Result.Message)
}

func TestLabelsAndAnnotationsMayChange(t *testing.T) {
	k := widgets()
	k.Spokes[1] = conversion.NewSpoke("v3", v3ToV2, func(src *WidgetV2, dst *WidgetV3) error {
		require.NoError(t, v2ToV3(src, dst))
		dst.Labels = map[string]string{"converted": "true"}
		dst.Annotations = map[string]string{"example.com/image": src.Spec.Image}
		return nil
	})
	h, err := conversion.Handler(&humus.Setup{}, k)
	require.NoError(t, err)
	resp := answer(t, h, review("example.com/v3", widget("v2", "a", `{"replicas":1,"image":"a:1"}`)))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	require.Contains(t, string(resp.ConvertedObjects[0].Raw), `"labels":{"converted":"true"},"annotations":{"example.com/image":"a:1"}`)
}

func TestObjectsOfNoRegisteredKindOrVersionFailTheReview(t *testing.T) {
	h := newHandler(t, nil)
	resp := answer(t, h, review("example.com/v3",
		`{"apiVersion":"example.com/v9","kind":"Widget","metadata":{"name":"a"}}`,
		`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"b","namespace":"ns"}}`,
		`{"apiVersion":"other.com/v1","kind":"Widget","metadata":{"name":"c"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"d"},"spec":{"size":"two"}}`,
		`[1,2]`,
	))
	require.Equal(t, metav1.StatusFailure, resp.Result.Status)
	msg := resp.Result.Message
	require.Contains(t, msg, "converting 5 of 5 objects to example.com/v3 failed: ")
	require.Contains(t, msg, "object 0 (Widget a): its version v9 is not one of Widget.example.com's: v2 (the hub) and [v1 v3]")
	require.Contains(t, msg, "object 1 (Gadget ns/b): no conversion is registered for the kind Gadget.example.com")
	require.Contains(t, msg, "object 2 (Widget c): its group other.com is not desiredAPIVersion's, example.com")
	require.Contains(t, msg, "object 3 (Widget d): decoding it as v1 into *conversion_test.WidgetV1: json: cannot unmarshal string into Go struct field")
	require.Contains(t, msg, "object 4: not an object: json: cannot unmarshal array")

	resp = answer(t, h, review("example.com/v7", widget("v1", "a", `{}`)))
	require.Contains(t, resp.Result.Message, "desiredAPIVersion's version v7 is not one of Widget.example.com's")
	resp = answer(t, h, review("other.com/v1", widget("v1", "a", `{}`)))
	require.Contains(t, resp.Result.Message, "object 0 (Widget default/a): its group example.com is not desiredAPIVersion's, other.com")
}

func TestABadRequestIsAnsweredWithAClearError(t *testing.T) {
	h := newHandler(t, nil)
	for _, tc := range []struct {
		name, body string
		code       int
		msg        string
	}{
		{"malformed", `{"kind":"ConversionReview",`, 400, "conversion: the body is no ConversionReview: unexpected end of JSON input\n"},
		{"v1beta1", `{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1beta1","request":{}}`, 400,
			`conversion: the body is a "ConversionReview" of apiVersion "apiextensions.k8s.io/v1beta1", not a ConversionReview of apiextensions.k8s.io/v1: set the CRD's conversionReviewVersions to [v1]` + "\n"},
		{"no request", `{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1"}`, 400, "conversion: the ConversionReview has no request\n"},
	} {
		code, out := post(t, h, tc.body)
		require.Equal(t, tc.code, code, tc.name)
		require.Equal(t, tc.msg, out, tc.name)
	}

	r := httptest.NewRequest(http.MethodPost, conversion.Path, io.LimitReader(zeros{}, conversion.MaxRequestBytes+1))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	require.Equal(t, "conversion: the ConversionReview is larger than 67108864 bytes\n", w.Body.String())

	r = httptest.NewRequest(http.MethodPost, conversion.Path, strings.NewReader(review("example.com/v1")))
	r.Header.Set("Content-Type", "application/yaml")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusUnsupportedMediaType, w.Code)

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, conversion.Path, nil))
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
	require.Equal(t, "POST", w.Header().Get("Allow"))

	resp := answer(t, h, review("example.com"))
	require.Equal(t, `the desiredAPIVersion "example.com" is not group/version: a custom resource's group is never empty`, resp.Result.Message)
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

func TestHandlerNamesEveryMistakeInTheKinds(t *testing.T) {
	_, err := conversion.Handler(nil,
		conversion.Kind[WidgetV2]{Group: "example.com", Kind: "Widget", Hub: "v2", Spokes: []conversion.Spoke[WidgetV2]{
			conversion.NewSpoke[WidgetV1, WidgetV2]("v1", nil, v2ToV1),
			conversion.NewSpoke[WidgetV3]("v3", v3ToV2, nil),
			conversion.NewSpoke("v2", v1ToV2, v2ToV1),
			conversion.NewSpoke("v1", v1ToV2, v2ToV1),
			{},
			conversion.NewSpoke("V4", v1ToV2, v2ToV1),
			conversion.InvalidSpoke[WidgetV2](errors.New("Widgets.Versions[6] was not made")),
		}},
		conversion.Kind[WidgetV1]{Group: "example.com", Kind: "Widget", Hub: "v1",
			Spokes: []conversion.Spoke[WidgetV1]{conversion.NewSpoke("v2", v2ToV1, v1ToV2)}},
		conversion.Kind[WidgetV1]{},
	)
	require.EqualError(t, err, ""+
		"conversion: Kind 0 (Widget.example.com): version v1 (*conversion_test.WidgetV1) has no conversion to the hub v2: its toHub is nil\n"+
		"conversion: Kind 0 (Widget.example.com): version v3 (*conversion_test.WidgetV3) has no conversion from the hub v2: its fromHub is nil\n"+
		"conversion: Kind 0 (Widget.example.com): version v2 is both the hub and spoke 2 (*conversion_test.WidgetV1): two hubs, or a hub with conversions; the hub has none\n"+
		"conversion: Kind 0 (Widget.example.com): version v1 is spoke 3 (*conversion_test.WidgetV1) and an earlier spoke: each version is declared once\n"+
		"conversion: Kind 0 (Widget.example.com): spoke 4 is a zero Spoke: make it with NewSpoke\n"+
		"conversion: Kind 0 (Widget.example.com): spoke 5's version \"V4\" is not a version name, such as v1beta1: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')\n"+
		"conversion: Kind 0 (Widget.example.com): Widgets.Versions[6] was not made\n"+
		"conversion: Kind 1 (Widget.example.com) is registered twice, with two hubs, v2 and v1: a kind has one hub, and is registered once\n"+
		"conversion: Kind 2: Group is empty\n"+
		"conversion: Kind 2: Kind is empty\n"+
		"conversion: Kind 2: Hub is empty: name the hub's version, usually the storage version\n"+
		"conversion: Kind 2: no spoke: a kind of one version needs no conversion\n"+
		"conversion: Handler was given a nil Setup")
}

func TestAReviewIsASpanWithItsDuration(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	h := newHandler(t, tel)
	answer(t, h, review("example.com/v1", widget("v2", "a", `{"replicas":1,"image":"a:1"}`)))
	spans := tel.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "ConversionReview", spans[0].Name())
	attrs := map[attribute.Key]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[kv.Key] = kv.Value.Emit()
	}
	require.Equal(t, map[attribute.Key]string{
		"humus.kube.conversion.uid":                 "705ab4f5-6393-11e8-b7cc-42010a800002",
		"humus.kube.conversion.desired_api_version": "example.com/v1",
		"humus.kube.conversion.object_count":        "1",
	}, attrs)
	m, ok := tel.Metric("github.com/z5labs/humus/kube/conversion", "humus.kube.conversion.review.duration")
	require.True(t, ok)
	dps := m.Data.(metricdata.Histogram[float64]).DataPoints
	require.Len(t, dps, 1)
	require.Equal(t, uint64(1), dps[0].Count)
	result, _ := dps[0].Attributes.Value("humus.kube.conversion.result")
	require.Equal(t, "Success", result.AsString())
}

// TestTheWebhookIsServedOverTLSAndHTTP2 serves the Handler as an App
// does: on an httpserver, with a self-made CA, called as the API server
// calls it.
func TestTheWebhookIsServedOverTLSAndHTTP2(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		s := &humus.Setup{Host: h.Host}
		handler, err := conversion.Handler(s, widgets())
		require.NoError(t, err)
		mux := http.NewServeMux()
		mux.Handle(conversion.Path, handler)
		ca, err := httpserver.NewAuthority(0, "webhooks.default.svc")
		require.NoError(t, err)
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: mux, Certificate: ca})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()

		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(ca.CABundle()))
		tr := &http.Transport{DialContext: h.Dial, ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "webhooks.default.svc", MinVersion: tls.VersionTLS12}}
		t.Cleanup(tr.CloseIdleConnections)
		resp, err := (&http.Client{Transport: tr}).Post("https://webhooks.default.svc:9443/convert", "application/json",
			bytes.NewBufferString(review("example.com/v1", widget("v2", "a", `{"replicas":5,"image":"a:1"}`))))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "HTTP/2.0", resp.Proto)
		var r apiextensionsv1.ConversionReview
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
		require.Equal(t, metav1.StatusSuccess, r.Response.Result.Status)
		require.JSONEq(t, widget("v1", "a", `{"size":5,"image":"a:1"}`), string(r.Response.ConvertedObjects[0].Raw))
	})
}

// BenchmarkAReviewOf100Objects answers a ConversionReview of 100 objects,
// half at each spoke, to the other spoke through the hub, and reports
// the time per object.
func BenchmarkAReviewOf100Objects(b *testing.B) {
	h, err := conversion.Handler(&humus.Setup{}, widgets())
	require.NoError(b, err)
	objects := make([]string, 100)
	for i := range objects {
		if i%2 == 0 {
			objects[i] = widget("v1", fmt.Sprint("w", i), `{"size":2,"image":"memcached:1.6"}`)
		} else {
			objects[i] = widget("v2", fmt.Sprint("w", i), `{"replicas":2,"image":"memcached:1.6"}`)
		}
	}
	body := review("example.com/v3", objects...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, conversion.Path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"status":"Success"`) {
			b.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/object")
}
