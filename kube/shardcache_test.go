package kube

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/sharding"
)

// TestAMemberLabelsOnlyWhatTheAgreedViewGivesItOrTakesAway checks each
// relabel's decision against client-go's fake metadata client: under an
// agreed view, an object in the member's own cache whose key another
// member owns is labelled with that member, and a stray whose key (its
// controller owner's, for a child) the member owns is labelled with it;
// its own keys' objects, another's strays, a stray that is no child of
// the resource's, and anything at all while no view is agreed are not
// written. Each write is a merge patch of the one label (its field
// manager is checked on the API server, in controlplanetests).
func TestAMemberLabelsOnlyWhatTheAgreedViewGivesItOrTakesAway(t *testing.T) {
	settings := testSettings()
	settings.Sharding.Enabled, settings.Sharding.CacheShare = true, true
	const me, other = "replica-1", "replica-2"
	a := sharding.AgreementOf(me, other)
	// mine and theirs are Widget names whose keys a gives to me and to
	// other.
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		name := fmt.Sprintf("w%d", i)
		if a.Owner("ns/"+name) == me {
			mine = name
		} else {
			theirs = name
		}
	}
	label := ShardLabel(settings.Name)
	newWidgetMeta := func(name, shard string) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "test.example.com/v1", Kind: "Widget"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		}
		if shard != "" {
			o.Labels = map[string]string{label: shard, "team": "a"}
		}
		return o
	}
	child := func(name, owner, shard string) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		}
		if owner != "" {
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "test.example.com/v1", Kind: "Widget", Name: owner, UID: types.UID("uid-" + owner), Controller: ptr.To(true)}}
		}
		if shard != "" {
			o.Labels = map[string]string{label: shard}
		}
		return o
	}

	for _, tc := range []struct {
		name   string
		agreed bool
		kind   int            // 0: the ConfigMaps (Owns), 1: the Widgets
		own    runtime.Object // in kinds[kind]'s own cache; a Widget in the Widgets' own cache for a stray child
		stray  runtime.Object
		want   string // the label written; "" for no write
	}{
		{"its own Widget whose key moved to another", true, 1, newWidgetMeta(theirs, me), nil, other},
		{"its own Widget whose key stays", true, 1, newWidgetMeta(mine, me), nil, ""},
		{"its own child whose owner's key moved", true, 0, child("c", theirs, me), nil, other},
		{"its own child whose owner's key stays", true, 0, child("c", mine, me), nil, ""},
		{"a stray Widget of its own key", true, 1, nil, newWidgetMeta(mine, ""), me},
		{"a stray Widget labelled by a member gone", true, 1, nil, newWidgetMeta(mine, "replica-0"), me},
		{"a stray Widget of another's key", true, 1, nil, newWidgetMeta(theirs, ""), ""},
		{"a stray child of its own key, whose owner it holds", true, 0, newWidgetMeta(mine, me), child("c", mine, ""), me},
		{"a stray child of its own key, whose owner it doesn't hold (outside the controller's selectors)", true, 0, nil, child("c", mine, ""), ""},
		{"a stray ConfigMap no Widget controls", true, 0, nil, child("c", "", ""), ""},
		{"its own Widget whose key moved, while no view is agreed", false, 1, newWidgetMeta(theirs, me), nil, ""},
		{"a stray Widget of its own key, while no view is agreed", false, 1, nil, newWidgetMeta(mine, ""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCluster(t)
			c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, settings,
				ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
					return Result[widgetStatus]{}, nil
				}), Owns(configMapGVR))
			obj := tc.own
			if obj == nil || tc.stray != nil {
				obj = tc.stray
			}
			scheme := metadatafake.NewTestScheme()
			require.NoError(t, metav1.AddMetaToScheme(scheme))
			md := metadatafake.NewSimpleMetadataClient(scheme, obj)
			c.clients.metadata = md
			sc := &shardCache{
				c: c, label: label, id: me,
				agreed: func() (sharding.Agreement, bool) { return a, tc.agreed },
				queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[relabel]()),
			}
			t.Cleanup(sc.queue.ShutDown)
			for _, gvr := range []struct {
				gvr   string
				field string
				key   func(any) (string, bool)
			}{{configMapGVR.String(), "", c.ownerKey}, {widgetGVR.String(), "", func(obj any) (string, bool) {
				key, err := cache.MetaNamespaceKeyFunc(obj)
				return key, err == nil
			}}} {
				strays := cache.NewSharedIndexInformer(&cache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
				sc.kinds = append(sc.kinds, &shareKind{own: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), key: gvr.key, strays: strays})
			}
			sc.kinds[0].gvr, sc.kinds[1].gvr = configMapGVR, widgetGVR
			k := sc.kinds[tc.kind]
			switch {
			case tc.stray == nil:
				require.NoError(t, k.own.Add(tc.own))
			case tc.own != nil:
				require.NoError(t, sc.kinds[1].own.Add(tc.own))
				fallthrough
			default:
				require.NoError(t, k.strays.GetIndexer().Add(tc.stray))
			}
			key, err := cache.MetaNamespaceKeyFunc(obj)
			require.NoError(t, err)
			sc.queue.Add(relabel{tc.kind, key})
			require.True(t, sc.relabelNext(t.Context()))

			var patches []clienttesting.PatchActionImpl
			for _, act := range md.Actions() {
				if p, ok := act.(clienttesting.PatchActionImpl); ok {
					patches = append(patches, p)
				}
			}
			if tc.want == "" {
				require.Empty(t, patches, "no write")
				return
			}
			require.Len(t, patches, 1)
			require.Equal(t, types.MergePatchType, patches[0].GetPatchType())
			require.JSONEq(t, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, tc.want), string(patches[0].GetPatch()))
			got, err := md.Resource(k.gvr).Namespace("ns").Get(t.Context(), obj.(metav1.Object).GetName(), metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, tc.want, got.Labels[label])
			if tc.kind == 1 && tc.stray == nil {
				require.Equal(t, "a", got.Labels["team"], "the user's own label is kept")
			}
		})
	}
}

// TestAStrayKeepsOnlyWhatItsRelabelReads checks strayMetadata: a stray's
// cached copy has its name, namespace, resourceVersion, the share's label
// and its controller owner reference, and nothing else.
func TestAStrayKeepsOnlyWhatItsRelabelReads(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "c", ResourceVersion: "7", UID: "u",
		Labels:      map[string]string{"shard.humus.kube/x": "m1", "team": "a"},
		Annotations: map[string]string{"big": "value"},
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Other", Name: "o"},
			{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w", Controller: ptr.To(true)},
		},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
	}}
	out, err := strayMetadata("shard.humus.kube/x")(in)
	require.NoError(t, err)
	require.Equal(t, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "c", ResourceVersion: "7",
		Labels:          map[string]string{"shard.humus.kube/x": "m1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w", Controller: ptr.To(true)}},
	}}, out)
}

// TestNewControllerRefusesAnOwnsSelectingOnTheShareLabel checks that,
// with CacheShare on, an Owns whose LabelSelector selects on the shard
// label is refused by name, as Settings.LabelSelector is (CheckSharding),
// and that without CacheShare it is the user's own label to select on.
func TestNewControllerRefusesAnOwnsSelectingOnTheShareLabel(t *testing.T) {
	settings := testSettings()
	settings.Sharding.Enabled, settings.Sharding.CacheShare = true, true
	owns := Owns(configMapGVR, LabelSelector(ShardLabel(settings.Name)+"=replica-2"))
	rec := ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
		return Result[widgetStatus]{}, nil
	})
	f := newFakeCluster(t)
	_, err := newController(&humus.Setup{Telemetry: humustest.NewTelemetry(t).Telemetry}, f.clients(), nil, settings, widgets(), rec, owns)
	require.ErrorContains(t, err, "the Owns of /v1, Resource=configmaps selects on it too")

	settings.Sharding.CacheShare = false
	_, err = newController(&humus.Setup{Telemetry: humustest.NewTelemetry(t).Telemetry}, f.clients(), nil, settings, widgets(), rec, owns)
	require.NoError(t, err)
}
