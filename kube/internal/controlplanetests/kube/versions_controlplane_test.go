//go:build controlplane

package kube_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// Three versions of a Sprocket that encode alike: v2 is the Controller's
// version, v1 the storage version and deprecated, v1beta1 not served.
type (
	sprocketSpec struct {
		Teeth int32 `json:"teeth"`
	}
	sprocketStatus struct {
		Seen int32 `json:"seen,omitempty"`
	}
	sprocketV1Spec struct {
		Teeth int32 `json:"teeth"`
	}
)

type sprocket = kube.Object[sprocketSpec, sprocketStatus]

var sprockets = kube.Resource[sprocketSpec, sprocketStatus]{
	Group: "versions.humus.example.com", Version: "v2", Kind: "Sprocket", Plural: "sprockets", Scope: kube.Namespaced,
	Versions: []kube.Version[sprocketSpec, sprocketStatus]{
		kube.NewVersion[sprocketV1Spec, sprocketStatus, sprocketSpec, sprocketStatus]("v1", nil, nil, kube.VersionOptions{
			Storage: true, Deprecated: true, DeprecationWarning: "versions.humus.example.com/v1 Sprocket is deprecated; use v2",
		}),
		kube.NewVersion[sprocketV1Spec, sprocketStatus, sprocketSpec, sprocketStatus]("v1beta1", nil, nil, kube.VersionOptions{NotServed: true}),
	},
}

// warnings collects the API server's warnings, as kubectl shows them.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// TestVersionsWithoutAWebhookAgainstTheAPIServer: versions that encode
// alike get strategy None, which the API server accepts and converts
// without a webhook; it stores the storage version, warns of the
// deprecated one, refuses the one not served; and the Controller, which
// watches v2 while the objects are stored at v1, reconciles objects
// written at either.
func TestVersionsWithoutAWebhookAgainstTheAPIServer(t *testing.T) {
	crd, err := sprockets.CRD()
	require.NoError(t, err)
	require.Equal(t, "None", string(crd.Spec.Conversion.Strategy))
	cluster, _, _ := startWithCRD(t, sprockets)
	cfg := cluster.RESTConfig()
	w := &warnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	at := func(version string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: sprockets.Group, Version: version, Resource: sprockets.Plural}).Namespace("default")
	}
	obj := func(version, name string, teeth int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": sprockets.Group + "/" + version, "kind": "Sprocket",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"teeth": teeth},
		}}
	}

	_, err = at("v1").Create(ctx, obj("v1", "old", 12), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err)
	require.Contains(t, w.all(), "versions.humus.example.com/v1 Sprocket is deprecated; use v2", "the deprecated version's warning")
	_, err = at("v2").Create(ctx, obj("v2", "new", 20), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err)
	got, err := at("v2").Get(ctx, "old", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "versions.humus.example.com/v2", got.GetAPIVersion(), "converted by the API server, no webhook")
	_, err = at("v1beta1").Get(ctx, "old", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "v1beta1 isn't served: %v", err)

	stored, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Get(ctx, crd.Name, metav1.GetOptions{})
	require.NoError(t, err)
	storedVersions, _, _ := unstructured.NestedStringSlice(stored.Object, "status", "storedVersions")
	require.Equal(t, []string{"v1"}, storedVersions, "the storage version")

	// The Controller watches v2; the objects are stored at v1.
	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "sprocket-controller"
	settings.LeaderElection.Namespace = "default"
	settings.LeaderElection.Identity = "replica-1"
	ctrl, err := kube.NewController(s, client, settings, sprockets,
		kube.ReconcilerFunc[sprocketSpec, sprocketStatus](func(_ context.Context, sp sprocket) (kube.Result[sprocketStatus], error) {
			return kube.Result[sprocketStatus]{Status: &sprocketStatus{Seen: sp.Spec.Teeth}}, nil
		}))
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	defer func() {
		stop()
		require.NoError(t, ctrl.Shutdown(context.Background()))
		<-served
	}()
	for name, teeth := range map[string]int64{"old": 12, "new": 20} {
		require.Eventually(t, func() bool {
			got, err := at("v1").Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			seen, _, _ := unstructured.NestedInt64(got.Object, "status", "seen")
			return seen == teeth
		}, time.Minute, 100*time.Millisecond, "%s reconciled, its status read at v1", name)
	}
}
