//go:build controlplane

// Package conversion_test runs kube/conversion's Handler, served by
// httpserver over TLS, as the conversion webhook of a real API server.
package conversion_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Gizmo: v2, the storage version and the hub, has
// replicas where v1 has size.
type (
	GizmoV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Size int64 `json:"size"`
		} `json:"spec"`
	}
	GizmoV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Replicas int64 `json:"replicas"`
		} `json:"spec"`
	}
)

// crdYAML is the CRD, written by hand, with the webhook's URL and CA
// bundle to fill in.
const crdYAML = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.conversion.example.com
spec:
  group: conversion.example.com
  names: {kind: Gizmo, plural: gizmos, singular: gizmo, listKind: GizmoList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: %s
        caBundle: %s
`

// TestTheAPIServerConvertsThroughTheWebhook creates Gizmos at each version
// and reads them at the other, a list at each version too, with the API
// server calling the App's webhook over TLS for every conversion.
func TestTheAPIServerConvertsThroughTheWebhook(t *testing.T) {
	cluster := controlplanetest.Start(t)
	cfg := cluster.RESTConfig()
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)

	// The App: its Host listens on 127.0.0.1 on a free port, which the
	// CRD's URL names.
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
	h, err := conversion.Handler(s, conversion.Kind[GizmoV2]{
		Group: "conversion.example.com", Kind: "Gizmo", Hub: "v2",
		Spokes: []conversion.Spoke[GizmoV2]{conversion.NewSpoke("v1",
			func(src *GizmoV1, dst *GizmoV2) error {
				dst.ObjectMeta, dst.Spec.Replicas = src.ObjectMeta, src.Spec.Size
				return nil
			},
			func(src *GizmoV2, dst *GizmoV1) error {
				dst.ObjectMeta, dst.Spec.Size = src.ObjectMeta, src.Spec.Replicas
				return nil
			})},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(conversion.Path, h)
	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: "127.0.0.1:0", Handler: mux, Certificate: ca})
	require.NoError(t, err)
	// Served as humus.Run serves it; not with humustest.TestService,
	// whose leak check would count client-go's connections to the API
	// server, which outlive the test's requests.
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, svc.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	url := fmt.Sprintf("https://%s%s", <-addr, conversion.Path)

	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(fmt.Appendf(nil, crdYAML, url, base64.StdEncoding.EncodeToString(ca.CABundle())), &crd))
	install(t, ext, &crd)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	gvr := func(v string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "conversion.example.com", Version: v, Resource: "gizmos"}).Namespace("default")
	}
	gizmo := func(v, name, field string, n int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conversion.example.com/" + v, "kind": "Gizmo",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "gizmo"}},
			"spec":     map[string]any{field: n},
		}}
	}
	// Created at v1, the API server converts it to v2 to store it.
	created, err := gvr("v1").Create(ctx, gizmo("v1", "old", "size", 3), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err, "creating at v1 converts it to the storage version v2 through the webhook")
	require.Equal(t, int64(3), spec(t, created, "size"))
	_, err = gvr("v2").Create(ctx, gizmo("v2", "new", "replicas", 5), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err)

	atV2, err := gvr("v2").Get(ctx, "old", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "conversion.example.com/v2", atV2.GetAPIVersion())
	require.Equal(t, int64(3), spec(t, atV2, "replicas"), "created at v1, read at v2")
	require.Equal(t, created.GetUID(), atV2.GetUID())
	require.Equal(t, map[string]string{"app": "gizmo"}, atV2.GetLabels())

	atV1, err := gvr("v1").Get(ctx, "new", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(5), spec(t, atV1, "size"), "created at v2, read at v1")

	list, err := gvr("v1").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	sizes := map[string]int64{}
	for _, o := range list.Items {
		require.Equal(t, "conversion.example.com/v1", o.GetAPIVersion())
		sizes[o.GetName()] = spec(t, &o, "size")
	}
	require.Equal(t, map[string]int64{"old": 3, "new": 5}, sizes, "a list at v1, converted in one review")

	// The webhook's instruments counted the conversions both ways.
	m, ok := tel.Metric("github.com/z5labs/humus/kube/conversion", "humus.kube.conversion.objects")
	require.True(t, ok)
	pairs := map[string]bool{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		from, _ := dp.Attributes.Value("humus.kube.conversion.from")
		to, _ := dp.Attributes.Value("humus.kube.conversion.to")
		outcome, _ := dp.Attributes.Value("humus.kube.conversion.outcome")
		pairs[from.AsString()+">"+to.AsString()+" "+outcome.AsString()] = true
	}
	require.True(t, pairs["v1>v2 converted"], "%v", pairs)
	require.True(t, pairs["v2>v1 converted"], "%v", pairs)
	for p := range pairs {
		require.Contains(t, p, " converted", "no conversion failed")
	}
}

func spec(t *testing.T, o *unstructured.Unstructured, field string) int64 {
	t.Helper()
	n, ok, err := unstructured.NestedInt64(o.Object, "spec", field)
	require.NoError(t, err)
	require.True(t, ok, "spec.%s in %v", field, o.Object)
	return n
}

// install creates crd, waits until it is established, and deletes it when
// the test ends.
func install(t testing.TB, ext apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	_, err := crds.Create(ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err, "the API server refused the CRD")
	t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.Name, metav1.DeleteOptions{}) })
	w, err := crds.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + crd.Name})
	require.NoError(t, err)
	defer w.Stop()
	for ev := range w.ResultChan() {
		got, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
	}
	t.Fatalf("CRD %s wasn't established: %v", crd.Name, ctx.Err())
}
