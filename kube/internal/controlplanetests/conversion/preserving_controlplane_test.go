//go:build controlplane

package conversion_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Crew: v2, the hub and storage version, gives each
// member a zone, which v1 lacks; v1 is Preserving.
type (
	CrewSpec struct {
		Members []CrewMember `json:"members,omitempty"`
	}
	CrewMember struct {
		Name string `json:"name"`
		Zone string `json:"zone,omitempty"`
	}
	CrewV1Spec struct {
		Members []CrewV1Member `json:"members,omitempty"`
	}
	CrewV1Member struct {
		Name string `json:"name"`
	}
)

var crewSpec CrewSpec

// crews is the Crew Resource, its webhook at url trusting caBundle, with
// spec.members a list-map keyed by name.
func crews(url string, caBundle []byte) kube.Resource[CrewSpec, struct{}] {
	return kube.Resource[CrewSpec, struct{}]{
		Group: "conversion.example.com", Version: "v2", Kind: "Crew", Plural: "crews", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{kube.Rules(&crewSpec, kube.Field(&crewSpec.Members).ListMap("name"))},
		Versions: []kube.Version[CrewSpec, struct{}]{kube.NewVersion("v1",
			func(src *kube.Object[CrewV1Spec, struct{}], dst *kube.Object[CrewSpec, struct{}]) error {
				dst.ObjectMeta = src.ObjectMeta
				for _, m := range src.Spec.Members {
					dst.Spec.Members = append(dst.Spec.Members, CrewMember{Name: m.Name})
				}
				return nil
			},
			func(src *kube.Object[CrewSpec, struct{}], dst *kube.Object[CrewV1Spec, struct{}]) error {
				dst.ObjectMeta = src.ObjectMeta
				for _, m := range src.Spec.Members {
					dst.Spec.Members = append(dst.Spec.Members, CrewV1Member{Name: m.Name})
				}
				return nil
			},
			kube.VersionOptions{Preserving: true})},
		ConversionWebhook: kube.WebhookClient{URL: url, CABundle: caBundle},
	}
}

// TestAWriteThroughAPreservingVersionKeepsEachListElementsHubOnlyValue:
// members [a(zone-a), b(zone-b)] created at v2, read at v1 and updated
// there to [b]: the API server stores b with zone-b, never a's zone-a.
func TestAWriteThroughAPreservingVersionKeepsEachListElementsHubOnlyValue(t *testing.T) {
	cluster := controlplanetest.Start(t)
	cfg := cluster.RESTConfig()
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)

	tel := humustest.NewTelemetry(t)
	host := humus.OSHost()
	listen := host.Listen
	addr := make(chan net.Addr, 1)
	host.Listen = func(ctx context.Context, network, address string) (net.Listener, error) {
		ln, err := listen(ctx, network, address)
		if err == nil {
			addr <- ln.Addr()
		}
		return ln, err
	}
	s := &humus.Setup{Host: host, Telemetry: tel.Telemetry}
	h, err := conversion.Handler(s, crews("", nil).Conversion())
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(conversion.Path, h)
	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: "127.0.0.1:0", Handler: mux, Certificate: ca})
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, svc.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	crd, err := crews(webhookURL((<-addr).String()), ca.CABundle()).CRD()
	require.NoError(t, err)
	install(t, ext, crd)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	at := func(v string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "conversion.example.com", Version: v, Resource: "crews"}).Namespace("default")
	}
	_, err = at("v2").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "conversion.example.com/v2", "kind": "Crew", "metadata": map[string]any{"name": "c"},
		"spec": map[string]any{"members": []any{
			map[string]any{"name": "a", "zone": "zone-a"},
			map[string]any{"name": "b", "zone": "zone-b"},
		}},
	}}, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err)

	// A v1 client reads it and writes back its members without a.
	v1, err := at("v1").Get(ctx, "c", metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, v1.GetAnnotations(), conversion.PreservedAnnotation)
	require.NoError(t, unstructured.SetNestedSlice(v1.Object, []any{map[string]any{"name": "b"}}, "spec", "members"))
	_, err = at("v1").Update(ctx, v1, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err)

	v2, err := at("v2").Get(ctx, "c", metav1.GetOptions{})
	require.NoError(t, err)
	members, _, err := unstructured.NestedSlice(v2.Object, "spec", "members")
	require.NoError(t, err)
	require.Equal(t, []any{map[string]any{"name": "b", "zone": "zone-b"}}, members, "b keeps its own zone, not a's")
	require.NotContains(t, v2.GetAnnotations(), conversion.PreservedAnnotation)
}
