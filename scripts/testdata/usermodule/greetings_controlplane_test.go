//go:build controlplane

package greetings_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/apptest"

	"example.com/greetings"
)

func TestTheWholeApp(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	crd, err := greetings.Greetings.CRDYAML()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(path, crd, 0o600))
	e.InstallCRD(t, path, "greetings.example.com")

	ns := e.Namespace(t, "greetings")
	cfg := e.Config(t, "greetings", ns, ns, "replica-0")
	a := apptest.Start(t, greetings.New(cfg), humus.OSHost())
	controlplanetest.Ready(t, cfg.ProbesAddr)

	gvr := greetings.Greetings.GVR()
	_, err = e.Dynamic.Resource(gvr).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "hi"},
		"spec":     map[string]any{"configMap": "words"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.Dynamic.Resource(greetings.ConfigMaps()).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "words"},
		"data":     map[string]any{"greeting": "hello"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	controlplanetest.Eventually(t, 30*time.Second, "the greeting in the status", func(ctx context.Context) (bool, error) {
		g, err := e.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, "hi", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s, _, _ := unstructured.NestedString(g.Object, "status", "greeting")
		return s == "hello", nil
	})
	require.Equal(t, 0, a.Terminate(t))
}
