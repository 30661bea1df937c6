//go:build controlplane

package kube_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// controllerRef is the JSON of a controller owner reference to the Gadget
// name, as a JSON patch names it.
func (h *gadgetCounter) controllerRef(name string) string {
	h.t.Helper()
	g, err := h.res.Get(h.ctx, name, metav1.GetOptions{})
	require.NoError(h.t, err)
	return `{"apiVersion":"controller.humus.example.com/v1","kind":"Gadget","name":"` + name + `","uid":"` + string(g.GetUID()) + `","controller":true}`
}

// jsonPatch patches the ConfigMap name as another writer, with a JSON
// patch, as kubectl edit would.
func (h *gadgetCounter) jsonPatch(name, patch string) {
	h.t.Helper()
	_, err := h.kc.CoreV1().ConfigMaps("default").Patch(h.ctx, name, types.JSONPatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "someone-else"})
	require.NoError(h.t, err)
}

// TestAChildTakenFromItsOwnerAgainstTheAPIServer: another writer moves a
// ConfigMap's controller owner reference from one Gadget to another, and
// removes it, with JSON patches, as kubectl edit would. Each change
// reconciles the Gadget that lost the child as well as the one that got
// it; and a Gadget whose Reconciler applies its ConfigMap re-owns it once
// its owner reference is removed. Before, only the new owner was queued,
// and the old one learnt of its loss at the next resync, hours later.
func TestAChildTakenFromItsOwnerAgainstTheAPIServer(t *testing.T) {
	h := startGadgetCounter(t, "sentinel", func(ctx context.Context, _ *gadgetCounter, rkc kubernetes.Interface, g gadget, _ bool) error {
		if g.Name == "sentinel" || g.Name == "g1" {
			return applyConfigMap(ctx, rkc, g, g.Name, nil)
		}
		return nil
	}, kube.Owns(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}))

	// g1's ConfigMap, its owner reference removed, is re-owned.
	h.create("g1", 1)
	h.seen("g1", 1)
	h.settled()
	h.jsonPatch("g1", `[{"op":"remove","path":"/metadata/ownerReferences"}]`)
	require.Eventually(t, func() bool {
		cm, err := h.kc.CoreV1().ConfigMaps("default").Get(h.ctx, "g1", metav1.GetOptions{})
		require.NoError(t, err)
		ref := metav1.GetControllerOf(cm)
		return ref != nil && ref.Name == "g1"
	}, 30*time.Second, 50*time.Millisecond, "g1 re-owns its ConfigMap")

	// A child moved from a to b, then released.
	h.create("a", 1)
	h.create("b", 1)
	h.seen("a", 1)
	h.seen("b", 1)
	_, err := h.kc.CoreV1().ConfigMaps("default").Create(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "loose"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	h.jsonPatch("loose", `[{"op":"add","path":"/metadata/ownerReferences","value":[`+h.controllerRef("a")+`]}]`)
	h.settled()
	a, b := h.count("a"), h.count("b")

	h.jsonPatch("loose", `[{"op":"replace","path":"/metadata/ownerReferences","value":[`+h.controllerRef("b")+`]}]`)
	h.settled()
	require.Equal(t, a+1, h.count("a"), "a, which lost its child, is reconciled")
	require.Equal(t, b+1, h.count("b"), "b, which got it, is reconciled")

	h.jsonPatch("loose", `[{"op":"remove","path":"/metadata/ownerReferences"}]`)
	h.settled()
	require.Equal(t, a+1, h.count("a"))
	require.Equal(t, b+2, h.count("b"), "b, whose child's owner reference was removed, is reconciled")
}

// TestAWatchesLabelMovedAgainstTheAPIServer: a MapFunc maps a ConfigMap to
// the Gadget its label names, and another writer moves the label from one
// Gadget to another with a JSON patch. Both are reconciled: the one the
// old ConfigMap mapped to, and the one the new maps to. Before, only the
// new ConfigMap was mapped.
func TestAWatchesLabelMovedAgainstTheAPIServer(t *testing.T) {
	const label = "watches.humus.example.com/gadget"
	h := startGadgetCounter(t, "sentinel", func(ctx context.Context, _ *gadgetCounter, rkc kubernetes.Interface, g gadget, _ bool) error {
		if g.Name == "sentinel" {
			return applyConfigMap(ctx, rkc, g, g.Name, map[string]string{label: g.Name})
		}
		return nil
	}, kube.Watches(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		kube.MapFunc(func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
			return []types.NamespacedName{{Namespace: obj.Namespace, Name: obj.Labels[label]}}
		})))

	h.create("a", 1)
	h.create("b", 1)
	h.seen("a", 1)
	h.seen("b", 1)
	_, err := h.kc.CoreV1().ConfigMaps("default").Create(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "config", Labels: map[string]string{label: "a"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	h.settled()
	a, b := h.count("a"), h.count("b")

	h.jsonPatch("config", `[{"op":"replace","path":"/metadata/labels/watches.humus.example.com~1gadget","value":"b"}]`)
	h.settled()
	require.Equal(t, a+1, h.count("a"), "a, which the ConfigMap no longer maps to, is reconciled")
	require.Equal(t, b+1, h.count("b"), "b, which it maps to now, is reconciled")
}
