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

// TestControllerRefIsControllerReferenceForACreate: the OwnerReference a
// Create sets is the apply configuration's, field by field, and is its
// object's controller as client-go reads it.
func TestControllerRefIsControllerReferenceForACreate(t *testing.T) {
	w := widget{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-w1"}}
	ac := widgets().ControllerReference(w)
	ref := widgets().ControllerRef(w)
	require.Equal(t, metav1.OwnerReference{
		APIVersion: *ac.APIVersion, Kind: *ac.Kind, Name: *ac.Name, UID: *ac.UID,
		Controller: ac.Controller, BlockOwnerDeletion: ac.BlockOwnerDeletion,
	}, ref)
	child := metav1.ObjectMeta{Name: "job", OwnerReferences: []metav1.OwnerReference{ref}}
	require.Equal(t, &ref, metav1.GetControllerOfNoCopy(&child))

	namespaces := Kind[corev1.Namespace]{GVR: namespaceGVR, Kind: "Namespace", Scope: Cluster}
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "uid-a"}}
	nac := namespaces.ControllerReference(ns)
	require.Equal(t, metav1.OwnerReference{
		APIVersion: "v1", Kind: "Namespace", Name: "team-a", UID: "uid-a",
		Controller: nac.Controller, BlockOwnerDeletion: nac.BlockOwnerDeletion,
	}, namespaces.ControllerRef(ns))
}
