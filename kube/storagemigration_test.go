package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

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

// A rewrite of an object the controller's informer doesn't see, outside
// its label or field selector, keeps nothing: no event of it will come to
// match its version. One of an object the cache holds is kept until its
// event comes.
func TestARewriteOfAnObjectOutsideTheSelectorKeepsNothing(t *testing.T) {
	c := &Controller{gvr: widgetGVR, listerCaches: map[schema.GroupVersionResource]*listerCache{widgetGVR: {form: cacheObjects}}}
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &cachedObject{}, 0, cache.Indexers{})
	require.NoError(t, inf.GetIndexer().Add(newCachedMetadata(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "selected", Namespace: testNamespace, UID: "u-selected", ResourceVersion: "5"}})))
	c.publishInformer(widgetGVR, inf)
	w := &migrationWrites{c: c}

	const outside = testNamespace + "/outside"
	w.Writing(outside)
	w.Wrote(outside, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "outside", Namespace: testNamespace, UID: "u-outside", ResourceVersion: "6"}}, false)
	require.Zero(t, c.echoes.Keys(), "the rewrite of an object the informer doesn't see keeps nothing")

	const selected = testNamespace + "/selected"
	w.Writing(selected)
	w.Wrote(selected, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "selected", Namespace: testNamespace, UID: "u-selected", ResourceVersion: "7"}}, false)
	require.Equal(t, 1, c.echoes.Keys(), "the rewrite of an object the cache holds is kept until its event comes")
	var queued []string
	c.echoes.Changed(selected, echoes.Version{UID: "u-selected", ResourceVersion: "7"}, func(key string) { queued = append(queued, key) })
	require.Empty(t, queued)
	require.Zero(t, c.echoes.Keys())
}
