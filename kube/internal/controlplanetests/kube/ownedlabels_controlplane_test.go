//go:build controlplane

package kube_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// TestALabelSelectedOwnsAgainstTheAPIServer: a controller Owns ConfigMaps
// with a set-based label selector, and its Reconciler applies, through a
// clientset built on the Client (protobuf answers), one ConfigMap the
// selector selects ("-sel") and one it doesn't ("-other"). The created
// child the Owns hears doesn't come back as work, which needs its labels
// read from the API server's answer; the one it doesn't hear queues
// nothing, ever. Counting is ordered by a sentinel Gadget: with one
// worker, once the sentinel's later changes are reconciled, every earlier
// event has been.
func TestALabelSelectedOwnsAgainstTheAPIServer(t *testing.T) {
	h := startGadgetCounter(t, "sentinel-sel", func(ctx context.Context, _ *gadgetCounter, rkc kubernetes.Interface, g gadget, _ bool) error {
		if err := applyConfigMap(ctx, rkc, g, g.Name+"-sel", map[string]string{"example.com/team": "a", "empty": ""}); err != nil {
			return err
		}
		return applyConfigMap(ctx, rkc, g, g.Name+"-other", map[string]string{"example.com/team": "c", "empty": ""})
	},
		kube.Owns(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			kube.LabelSelector("example.com/team in (a,b),empty,!missing")))

	h.create("g1", 3)
	h.seen("g1", 3)
	h.settled()
	require.Equal(t, 1, h.count("g1"), "a new object is reconciled once")

	h.poke("g1-sel")
	h.settled()
	require.Equal(t, 2, h.count("g1"), "another field manager's change to its selected ConfigMap is reconciled once")

	h.poke("g1-other")
	h.poke("g1-other")
	h.settled()
	require.Equal(t, 2, h.count("g1"), "a change to its unselected ConfigMap queues nothing")

	h.setSize("g1", 2)
	h.seen("g1", 2)
	h.settled()
	require.Equal(t, 3, h.count("g1"), "a spec change is reconciled once")

	// A second Gadget, created while the first's children exist.
	h.create("g2", 1)
	h.seen("g2", 1)
	h.settled()
	require.Equal(t, 1, h.count("g2"), "a second new object is reconciled once")
	require.Equal(t, 3, h.count("g1"))

	// The unselected child deleted: the Owns never saw it, nothing queued.
	require.NoError(t, h.kc.CoreV1().ConfigMaps("default").Delete(h.ctx, "g2-other", metav1.DeleteOptions{}))
	h.settled()
	require.Equal(t, 1, h.count("g2"), "the deletion of its unselected ConfigMap queues nothing")

	// The selected child deleted: queued once, and the re-creation's event dropped.
	require.NoError(t, h.kc.CoreV1().ConfigMaps("default").Delete(h.ctx, "g2-sel", metav1.DeleteOptions{}))
	h.settled()
	require.Equal(t, 2, h.count("g2"), "the deletion of its selected ConfigMap reconciles it once; the re-creation doesn't come back")
}
