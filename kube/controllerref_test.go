package kube

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestControllerReferenceNeedsNoTypeMeta(t *testing.T) {
	w := widget{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-w1"}}
	ref := widgets().ControllerReference(w)
	require.Equal(t, "test.example.com/v1", *ref.APIVersion)
	require.Equal(t, "Widget", *ref.Kind)
	require.Equal(t, "w1", *ref.Name)
	require.Equal(t, types.UID("uid-w1"), *ref.UID)
	require.True(t, *ref.Controller)
	require.True(t, *ref.BlockOwnerDeletion)

	namespaces := Kind[corev1.Namespace]{GVR: namespaceGVR, Kind: "Namespace", Scope: Cluster}
	ref = namespaces.ControllerReference(corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "uid-a"}})
	require.Equal(t, "v1", *ref.APIVersion)
	require.Equal(t, "Namespace", *ref.Kind)
	require.Equal(t, "team-a", *ref.Name)
	require.Equal(t, types.UID("uid-a"), *ref.UID)
	require.True(t, *ref.Controller)
}
