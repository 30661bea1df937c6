package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/internal/echoes"
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

// The migration's rewrites are the controller's own writes to the echo
// filter (internal/echoes), as they were when the job was kube's: a
// rewrite's event isn't queued, a rewrite the API server skipped keeps
// nothing (no event comes of it), nor does one that failed, and none
// holds its key's events once it returned.
func TestMigrationRewritesAreTheControllersOwnWrites(t *testing.T) {
	c := &Controller{}
	w := &migrationWrites{c: c}
	var queued []string
	add := func(key string) { queued = append(queued, key) }
	const key = testNamespace + "/w1"
	rewritten := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: testNamespace, UID: "u1", ResourceVersion: "6"}}

	w.Writing(key)
	w.Wrote(key, rewritten, false)
	require.Equal(t, 1, c.echoes.Keys(), "a rewrite's version is kept until its event comes")
	c.echoes.Changed(key, echoes.Version{UID: "u1", ResourceVersion: "6"}, add)
	require.Empty(t, queued, "the rewrite's own event")
	require.Zero(t, c.echoes.Keys())

	w.Writing(key)
	w.Wrote(key, rewritten, true)
	require.Zero(t, c.echoes.Keys(), "a rewrite the API server skipped keeps nothing")

	w.Writing(key)
	w.Wrote(key, nil, false)
	require.Zero(t, c.echoes.Keys(), "nor does one that failed")
	c.echoes.Changed(key, echoes.Version{UID: "u1", ResourceVersion: "7"}, add)
	require.Equal(t, []string{key}, queued, "another writer's change is queued")
}
