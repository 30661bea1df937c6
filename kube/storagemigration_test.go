package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
)

func TestMigrateStorageNamesWhatItCantRunWith(t *testing.T) {
	s := testSettings()
	s.MigrateStorage = true
	require.NoError(t, s.check())

	s.Namespace = "team-a"
	s.Sharding.Enabled = true
	err := s.check()
	require.ErrorContains(t, err, `Settings.MigrateStorage rewrites the objects of every namespace, so Settings.Namespace must be "", not "team-a"`)
	require.ErrorContains(t, err, "Settings.Sharding has no leader")

	f := newFakeCluster(t)
	s = testSettings()
	s.MigrateStorage = true
	_, err = newKindController(&humus.Setup{}, f.clients(), nil, s, namespaces(),
		KindReconcilerFunc[corev1.Namespace](func(context.Context, corev1.Namespace) (time.Duration, error) { return 0, nil }))
	require.ErrorContains(t, err, "Settings.MigrateStorage is for a Resource, whose CRD is the controller's own, not a Kind (Namespace)")
}
