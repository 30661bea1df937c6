package kube

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/log"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/echoes"
)

// ownsConfigMaps is a Widget controller that Owns ConfigMaps and
// Deployments, as far as ownedWrite and ownerHandler read it.
func ownsConfigMaps() *Controller {
	return &Controller{group: "test.example.com", kind: "Widget", scope: Namespaced, owns: []informerSpec{
		{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
		{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
	}}
}

// answering is a RoundTripper that answers each request with status and body as JSON,
// after waiting for proceed when it isn't nil, and records what it was
// sent.
type answering struct {
	status  int // 201 Created unless set
	body    string
	proceed chan struct{}
	started chan struct{}
}

func (a answering) RoundTrip(req *http.Request) (*http.Response, error) {
	if a.started != nil {
		close(a.started)
	}
	if a.proceed != nil {
		<-a.proceed
	}
	status := a.status
	if status == 0 {
		status = http.StatusCreated
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(a.body)), Request: req}, nil
}

// configMapOfW1 is the metadata Owns caches of ConfigMap w1 in team-a at
// resourceVersion rv, controlled by Widget w1.
func configMapOfW1(rv string) *cachedObject {
	return newCachedMetadata(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "w1", Namespace: "team-a", UID: "cm-uid", ResourceVersion: rv,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "w-uid", Controller: ptr.To(true)}},
	}})
}

const configMapAnswer = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w1","namespace":"team-a","uid":"cm-uid","resourceVersion":"5","annotations":{"resourceVersion":"9"},"ownerReferences":[{"apiVersion":"test.example.com/v1","kind":"Widget","name":"w1","uid":"w-uid","controller":true}]},"data":{"a":"b"}}`

func applyConfigMap(t *testing.T, c *Controller, rt http.RoundTripper, ctx context.Context) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, "https://api.example.com/api/v1/namespaces/team-a/configmaps/w1?fieldManager=widgets", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := apitransport.WriteHooks{Next: rt}.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.JSONEq(t, configMapAnswer, string(b), "the client reads the answer as the API server sent it")
}

func TestAnOwnedObjectsEventIsQueuedUnlessItIsWhatItsOwnersReconcileCreated(t *testing.T) {
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})

	applyConfigMap(t, c, answering{body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/w1"))
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "the add of the version the reconcile's apply returned isn't queued")

	h.OnUpdate(configMapOfW1("5"), configMapOfW1("6"))
	require.Equal(t, 1, queue.Len(), "another change to it is")
	key, _ := queue.Get()
	require.Equal(t, "team-a/w1", key)
	queue.Done(key)

	applyConfigMap(t, c, answering{body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/other"))
	h.OnUpdate(configMapOfW1("4"), configMapOfW1("5"))
	require.Equal(t, 1, queue.Len(), "a write by another owner's reconcile is news to this owner")
	key, _ = queue.Get()
	queue.Done(key)

	applyConfigMap(t, c, answering{body: configMapAnswer}, t.Context())
	h.OnUpdate(configMapOfW1("4"), configMapOfW1("5"))
	require.Equal(t, 1, queue.Len(), "a write made outside a reconcile isn't the controller's own")
	key, _ = queue.Get()
	queue.Done(key)

	applyConfigMap(t, c, answering{status: http.StatusOK, body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/w1"))
	h.OnUpdate(configMapOfW1("4"), configMapOfW1("5"))
	require.Equal(t, 1, queue.Len(), "a write that didn't create the object may have changed nothing, and returned another writer's change")
	key, _ = queue.Get()
	queue.Done(key)

	applyConfigMap(t, c, answering{body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/w1"))
	h.OnDelete(configMapOfW1("7"))
	require.Equal(t, 1, queue.Len(), "a deletion is always queued")
	require.Zero(t, c.ownedCreations.Keys(), "and forgets the writes of the object deleted")
}

func TestARelistOfAnUnchangedOwnedObjectIsntQueued(t *testing.T) {
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})

	applyConfigMap(t, c, answering{body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/w1"))
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "the add of the version the reconcile's apply returned isn't queued")
	// The informer's watch breaks and it lists again: the object is
	// unchanged, and comes as an update from its version to the same.
	h.OnUpdate(configMapOfW1("5"), configMapOfW1("5"))
	require.Zero(t, queue.Len(), "a relist's update to the same version is no news to the owner")
	h.OnUpdate(configMapOfW1("5"), configMapOfW1("6"))
	require.Equal(t, 1, queue.Len(), "a change is")
}

func TestAnOwnedObjectsEventsAreHeldWhileItsOwnersWriteIsInFlight(t *testing.T) {
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})

	rt := answering{body: configMapAnswer, proceed: make(chan struct{}), started: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		applyConfigMap(t, c, rt, withReconciling(t.Context(), c, "team-a/w1"))
	}()
	<-rt.started
	// Both come before the apply's answer: an earlier change of
	// another's, and the apply's own.
	h.OnUpdate(configMapOfW1("3"), configMapOfW1("4"))
	h.OnUpdate(configMapOfW1("4"), configMapOfW1("5"))
	require.Zero(t, queue.Len(), "held while the write is in flight")
	close(rt.proceed)
	<-done
	require.Equal(t, 1, queue.Len(), "the other change is queued once the write returns, and the write's own isn't")
	require.Zero(t, c.ownedCreations.Keys(), "nothing is kept once the write's event has come")
}

// withOwnedCache gives c an Owns cache of ConfigMaps holding objs, as the
// owned informer's indexer holds them once their events have come.
func withOwnedCache(t *testing.T, c *Controller, objs ...*cachedObject) {
	t.Helper()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	c.listerCaches = map[schema.GroupVersionResource]*listerCache{gvr: {form: cacheOwned}}
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &cachedObject{}, 0, cache.Indexers{})
	for _, o := range objs {
		require.NoError(t, inf.GetIndexer().Add(o))
	}
	c.publishInformer(gvr, inf)
}

func TestACreationWhoseEventCameBeforeItsAnswerKeepsNothing(t *testing.T) {
	// A POST's events aren't held, its object's name being known only
	// from its answer: the creation's event can come first, and queue
	// the owner. Kept then, the version the answer returned would stay
	// until the ConfigMap's deletion, as no event would come to match it.
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})
	create := func() {
		t.Helper()
		req, err := http.NewRequestWithContext(withReconciling(t.Context(), c, "team-a/w1"), http.MethodPost,
			"https://api.example.com/api/v1/namespaces/team-a/configmaps?fieldManager=widgets", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := apitransport.WriteHooks{Next: answering{body: configMapAnswer}}.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
	}

	withOwnedCache(t, c, configMapOfW1("5"))
	h.OnAdd(configMapOfW1("5"), false)
	require.Equal(t, 1, queue.Len(), "the creation's event, before its answer, queues its owner")
	create()
	require.Zero(t, c.ownedCreations.Keys(), "a creation whose version the cache holds already keeps nothing")
	key, _ := queue.Get()
	queue.Done(key)

	// Nor one whose object the cache holds at a newer version already:
	// another writer, such as the Deployment controller writing a new
	// Deployment's status, changed it before the answer came.
	withOwnedCache(t, c, configMapOfW1("6"))
	h.OnAdd(configMapOfW1("5"), false)
	h.OnUpdate(configMapOfW1("5"), configMapOfW1("6"))
	create()
	require.Zero(t, c.ownedCreations.Keys(), "a creation whose object the cache holds at a newer version keeps nothing")
	require.Equal(t, 1, queue.Len())
	key, _ = queue.Get()
	queue.Done(key)

	// Another object of the same name, an older one, isn't a newer
	// version of the one created.
	withOwnedCache(t, c, newCachedMetadata(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "w1", Namespace: "team-a", UID: "old-cm-uid", ResourceVersion: "6",
	}}))
	create()
	require.Equal(t, 1, c.ownedCreations.Keys(), "a creation whose object's event hasn't come is kept")
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len())
	require.Zero(t, c.ownedCreations.Keys())

	// A creation whose event hasn't come is kept until it comes, as
	// before.
	withOwnedCache(t, c)
	create()
	require.Equal(t, 1, c.ownedCreations.Keys())
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "its event isn't queued")
	require.Zero(t, c.ownedCreations.Keys())
}

func TestACreationALabelSelectedOwnsDoesntSeeKeepsNothing(t *testing.T) {
	// An Owns whose label selector the Reconciler's child doesn't match
	// never hears of the child: kept, the creation's version would stay
	// for good, as no event, the deletion's neither, would come for it.
	c := ownsConfigMaps()
	c.owns[0].selector = "team=a"
	answer := func(labels string) answering {
		return answering{body: strings.Replace(configMapAnswer, `"annotations":`, `"labels":`+labels+`,"annotations":`, 1)}
	}
	ctx := withReconciling(t.Context(), c, "team-a/w1")
	do := func(rt answering) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, "https://api.example.com/api/v1/namespaces/team-a/configmaps/w1?fieldManager=widgets", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := apitransport.WriteHooks{Next: rt}.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
	}

	do(answer(`{"team":"b"}`))
	require.Zero(t, c.ownedCreations.Keys(), "a child the selector doesn't select keeps nothing")
	do(answering{body: configMapAnswer})
	require.Zero(t, c.ownedCreations.Keys(), "nor one without labels")

	do(answer(`{"team":"a"}`))
	require.Equal(t, 1, c.ownedCreations.Keys(), "a child the selector selects is kept until its event comes")
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "and its event isn't queued")
	require.Zero(t, c.ownedCreations.Keys())
}

func TestACreationAnyOwnsOfItsResourceSelectsIsKept(t *testing.T) {
	// Two Owns of one group and resource, at two versions, each with its
	// own selector: an event's key has no version, so a child either one
	// hears is kept, whichever version's path wrote it. (Found by a
	// helper: the first Owns' selector alone judged it.)
	c := &Controller{group: "test.example.com", kind: "Widget", scope: Namespaced, owns: []informerSpec{
		{gvr: schema.GroupVersionResource{Group: "parts.example.com", Version: "v1", Resource: "gears"}, selector: "tier=a"},
		{gvr: schema.GroupVersionResource{Group: "parts.example.com", Version: "v2", Resource: "gears"}, selector: "tier=b"},
	}}
	gear := func(tier string) answering {
		return answering{body: `{"apiVersion":"parts.example.com/v2","kind":"Gear","metadata":{"name":"w1","namespace":"team-a","uid":"cm-uid","resourceVersion":"5","labels":{"tier":"` + tier + `"},"ownerReferences":[{"apiVersion":"test.example.com/v1","kind":"Widget","name":"w1","uid":"w-uid","controller":true}]}}`}
	}
	write := func(rt answering) {
		t.Helper()
		req, err := http.NewRequestWithContext(withReconciling(t.Context(), c, "team-a/w1"), http.MethodPatch,
			"https://api.example.com/apis/parts.example.com/v2/namespaces/team-a/gears/w1?fieldManager=widgets", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := apitransport.WriteHooks{Next: rt}.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
	}
	write(gear("c"))
	require.Zero(t, c.ownedCreations.Keys(), "neither Owns selects tier=c")
	write(gear("b"))
	require.Equal(t, 1, c.ownedCreations.Keys(), "the v2 Owns selects tier=b")
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Group: "parts.example.com", Resource: "gears"})
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "and its creation's event isn't queued")
}

// panicking is a RoundTripper that panics, as a broken layer might.
type panicking struct{}

func (panicking) RoundTrip(*http.Request) (*http.Response, error) { panic("the transport panicked") }

func TestAnOwnedWriteThatPanicsHoldsNoEventForGood(t *testing.T) {
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})
	req, err := http.NewRequestWithContext(withReconciling(t.Context(), c, "team-a/w1"), http.MethodPatch,
		"https://api.example.com/api/v1/namespaces/team-a/configmaps/w1?fieldManager=widgets", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Panics(t, func() { _, _ = apitransport.WriteHooks{Next: panicking{}}.RoundTrip(req) })
	require.Zero(t, c.ownedCreations.Keys(), "the write ended")
	h.OnUpdate(configMapOfW1("4"), configMapOfW1("5"))
	require.Equal(t, 1, queue.Len(), "a later change of the child isn't held")
}

// Reading a reconcile's write as one to an owned resource costs what
// echoes.OwnedWriteOf costs, and no more: the controller's Owns, as
// OwnedWriteOf takes them, are made once, not on every write the
// transport hands the reconcile's write hook (twice a write, with
// noteApplied).
func TestAnOwnedWriteAllocatesNoCopyOfTheOwns(t *testing.T) {
	c := ownsConfigMaps()
	owns := make([]echoes.Owned, len(c.owns))
	for i, o := range c.owns {
		owns[i] = echoes.Owned{GVR: o.gvr, Selector: o.selector}
	}
	for _, req := range []*http.Request{
		{Method: http.MethodPatch, URL: &url.URL{Path: "/api/v1/namespaces/team-a/configmaps/w1"}},
		{Method: http.MethodPatch, URL: &url.URL{Path: "/apis/test.example.com/v1/namespaces/team-a/widgets/w1"}},
	} {
		want := testing.AllocsPerRun(100, func() { _, _ = echoes.OwnedWriteOf("team-a/w1", req, owns) })
		got := testing.AllocsPerRun(100, func() { _, _ = c.ownedWrite("team-a/w1", req) })
		require.Equal(t, want, got, "%s %s", req.Method, req.URL.Path)
	}
}

// A POST whose child is created and then deleted, the events of both
// coming to the Owns' informer before the POST's answer does, keeps
// nothing: no event is left to match the version the answer names, which
// was kept for the life of the process.
func TestACreationDeletedBeforeItsAnswerKeepsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var n counter
		c, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), widgets(), noStatus(&n),
			Owns(configMapGVR, CacheObjects()))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()

		cm := wholeConfigMap("c1", "a", widgetRef("w1", true))
		cm.SetResourceVersion(f.nextResourceVersion())
		f.create(t, configMapGVR, cm)
		synctest.Wait()
		require.NoError(t, f.dynamic.Tracker().Delete(configMapGVR, testNamespace, "c1"))
		synctest.Wait()
		require.False(t, f.exists(configMapGVR, testNamespace, "c1"))

		// The POST's answer, the created object, comes now.
		answer, err := cm.MarshalJSON()
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(withReconciling(t.Context(), c, testNamespace+"/w1"), http.MethodPost,
			"https://api.example.com/api/v1/namespaces/"+testNamespace+"/configmaps?fieldManager=widgets", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := apitransport.WriteHooks{Next: answering{body: string(answer)}}.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Zero(t, c.ownedCreations.Keys(), "a creation whose object is gone, its events come, keeps nothing")
		require.NoError(t, s.stop(t))
	})
}

// An Owns given ReconcileOwnCreations keeps nothing of its owner's own
// creations: their events queue the owner, as controller-runtime's Owns
// does (issue 37). The Owns of another resource still drops them.
func TestReconcileOwnCreationsQueuesTheOwnersOwnCreation(t *testing.T) {
	c := ownsConfigMaps()
	c.owns[0].ownCreations = true
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})

	ctx := withReconciling(t.Context(), c, "team-a/w1")
	applyConfigMap(t, c, answering{body: configMapAnswer}, ctx)
	h.OnAdd(configMapOfW1("5"), false)
	require.Equal(t, 1, queue.Len(), "the add of the version the reconcile's apply created is queued")
	key, _ := queue.Get()
	require.Equal(t, "team-a/w1", key)
	queue.Done(key)
	require.Zero(t, c.ownedCreations.Keys(), "nothing is kept")
	require.Empty(t, scopeOf(ctx).takeCreated(), "and nothing is reported as unseen")

	c.owns[0].ownCreations = false
	applyConfigMap(t, c, answering{body: configMapAnswer}, ctx)
	h.OnAdd(configMapOfW1("5"), false)
	require.Zero(t, queue.Len(), "without it, the add isn't queued")
	require.Equal(t, []string{"configmaps team-a/w1"}, scopeOf(ctx).takeCreated(), "and the creation is the reconcile's unseen one")
}

// ReconcileOwnCreations is an Owns' alone: a Watches queues every event.
func TestReconcileOwnCreationsIsAnOwnsOption(t *testing.T) {
	f := newFakeCluster(t)
	var n counter
	_, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), widgets(), noStatus(&n),
		Owns(configMapGVR, ReconcileOwnCreations()),
		Watches(deploymentGVR, byConfigLabel, ReconcileOwnCreations()))
	require.EqualError(t, err, "kube: part 1: Watches(apps/v1, Resource=deployments) is given ReconcileOwnCreations: only an Owns drops the events of its owner's own creations; a Watches queues every event")
}

// createdConfigMapAnswer is what the API server answers the creation of
// ConfigMap w1 in the test namespace, controlled by Widget w1, at
// resourceVersion 100.
const createdConfigMapAnswer = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w1","namespace":"default","uid":"cm-uid","resourceVersion":"100","ownerReferences":[{"apiVersion":"test.example.com/v1","kind":"Widget","name":"w1","uid":"uid-w1","controller":true}]}}`

// A Reconciler that creates a child and leaves its status as it was, as
// one ported from controller-runtime that reports its children from the
// cache does, isn't reconciled again by the child's creation: a DEBUG
// record names the child and ReconcileOwnCreations. One whose status
// changed, having reported the child from what its creation returned, is
// not reported. Given it, the
// creation reconciles the owner again, as in controller-runtime, and
// nothing is logged (issue 37).
func TestAnOwnCreationThatLeavesTheStatusAsItWasIsReported(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []WatchOption
		status     *widgetStatus // what the creating reconcile returns
		reconciles int
		records    int
	}{
		{"dropped", nil, nil, 1, 1},
		{"dropped, with the status as it was", nil, &widgetStatus{}, 1, 1},
		{"dropped, with a status that reports it", nil, &widgetStatus{Message: "created w1"}, 1, 0},
		{"with ReconcileOwnCreations", []WatchOption{ReconcileOwnCreations()}, nil, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeCluster(t, newWidget("w1", 1))
				tel := humustest.NewTelemetry(t)
				var n counter
				c := newWidgetController(t, f, tel.Telemetry, testSettings(),
					ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
						if n.add(w.Name) > 1 {
							return Result[widgetStatus]{}, nil
						}
						// The creation, as a client on Client.Config sends
						// it, and then its object, as the informer sees it.
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/api/v1/namespaces/default/configmaps", strings.NewReader(`{}`))
						if err != nil {
							return Result[widgetStatus]{}, err
						}
						resp, err := apitransport.WriteHooks{Next: answering{body: createdConfigMapAnswer}}.RoundTrip(req)
						if err != nil {
							return Result[widgetStatus]{}, err
						}
						_ = resp.Body.Close()
						child := ownedConfigMap(testNamespace, "w1", metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "uid-w1", Controller: ptr.To(true)})
						child.UID, child.ResourceVersion = "cm-uid", "100"
						return Result[widgetStatus]{Status: tc.status}, f.metadata.Tracker().Create(configMapGVR, child, testNamespace)
					}),
					Owns(configMapGVR, tc.opts...))
				s := serve(t, c)
				synctest.Wait()
				require.Equal(t, map[string]int{"w1": tc.reconciles}, n.get())
				recs := recordsWithBody(tel, "own creations don't reconcile again")
				require.Len(t, recs, tc.records)
				for _, rec := range recs {
					require.Equal(t, log.SeverityDebug, rec.Severity())
					a := attrs(rec)
					require.Equal(t, `["configmaps default/w1"]`, a["created"])
					require.Contains(t, a["why"], "give their Owns kube.ReconcileOwnCreations()")
				}
				require.NoError(t, s.stop(t))
			})
		})
	}
}
