package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/sharding"
	"github.com/z5labs/humus/kube/internal/tenure"
)

// A view change that is never agreed (a member joins and crashes before
// acknowledging, and its Lease expires) brings the members back to the
// view they agreed before. While no view was agreed, checkStray and
// checkOwn dropped every event ("the walk at the next agreed view checks
// it"), and relabelNext forgot what it dequeued; but run skips the walk
// and the strays' restart for an agreed view whose Key is the last one's.
// So an object created unlabelled during the disagreement is never
// labelled: no member caches it, and it is never reconciled (until some
// unrelated update of it, or the next real view change).
func TestAStrayCreatedWhileNoViewIsAgreedIsLabelledWhenTheSameViewIsAgreedAgain(t *testing.T) {
	settings := cacheShareSettings()
	const me = "replica-1"
	a := sharding.AgreementOf(me)
	f := newFakeCluster(t)
	c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, settings, noopReconciler())
	scheme := metadatafake.NewTestScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	md := metadatafake.NewSimpleMetadataClient(scheme)
	c.clients.metadata = md

	var mu sync.Mutex
	ok := true
	sc := &shardCache{
		c: c, label: ShardLabel(settings.Name), id: me,
		agreed: func() (sharding.Agreement, bool) {
			mu.Lock()
			defer mu.Unlock()
			return a, ok
		},
		wake:  make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[relabel]()),
	}
	sc.kinds = []*shareKind{{gvr: widgetGVR, own: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), key: func(obj any) (string, bool) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return key, err == nil
	}}}
	k := sc.kinds[0]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); sc.run(ctx) }()
	defer func() { cancel(); <-done }()

	sc.poke() // the first agreed view
	require.Eventually(t, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.strays != nil && k.strays.HasSynced()
	}, 5*time.Second, 10*time.Millisecond)

	mu.Lock()
	ok = false // a member joins: a new view, not agreed yet
	mu.Unlock()
	w := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "test.example.com/v1", Kind: "Widget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: types.UID("uid-w")},
	}
	require.NoError(t, md.Tracker().Create(widgetGVR, w, "ns"))
	require.Eventually(t, func() bool { _, ok := k.stray("ns/w"); return ok }, 5*time.Second, 10*time.Millisecond,
		"the strays' informer sees it, while no view is agreed")

	mu.Lock()
	ok = true // the joiner crashed: back to the view agreed before
	mu.Unlock()
	sc.poke() // as Member.step does when it takes up an agreed view

	patched := func() bool {
		for _, act := range md.Actions() {
			if p, ok := act.(clienttesting.PatchActionImpl); ok && p.GetName() == "w" {
				return true
			}
		}
		return false
	}
	require.Eventually(t, patched, 2*time.Second, 10*time.Millisecond,
		"the stray created while no view was agreed is labelled once a view is agreed again")
}

// A member whose join fails (here its Lease can't be created) returns
// from Serve; with CacheShare, serveShard has already made the shard
// cache, whose relabel queue runs goroutines of its own (the delaying
// queue's loop, the metrics' loop) that only run's ShutDown stops, and
// run never started. Without CacheShare, the same failed join leaks
// nothing.
func TestAMemberWhoseJoinFailsLeaksNoGoroutines(t *testing.T) {
	for _, share := range []bool{false, true} {
		t.Run(map[bool]string{false: "Enabled", true: "CacheShare"}[share], func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			func() {
				s := cacheShareSettings()
				s.Sharding.CacheShare = share
				f := newFakeCluster(t)
				f.kube.PrependReactor("create", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("refused")
				})
				c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, s, noopReconciler())
				err := c.Serve(t.Context())
				require.ErrorContains(t, err, "joining its members")
				require.NoError(t, c.Shutdown(context.Background()))
			}()
			goleak.VerifyNone(t, ignore)
		})
	}
}

// A Settings.LabelSelector (or an Owns' LabelSelector) of blanks selects
// everything and passes NewController's checks, but shareSelectors joins
// the share's own requirement to it with a comma: " ,shard...=replica-1"
// is no selector, and the API server refuses every list of the member's
// informers.
func TestABlankLabelSelectorStillSelectsTheShare(t *testing.T) {
	s := cacheShareSettings()
	s.LabelSelector = " "
	f := newFakeCluster(t)
	c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, s, noopReconciler(), Owns(configMapGVR, LabelSelector(" ")))
	for _, sel := range []string{c.settings.LabelSelector, c.owns[0].selector} {
		parsed, err := labels.Parse(sel)
		require.NoError(t, err, "%q", sel)
		require.True(t, parsed.Matches(labels.Set{ShardLabel(s.Name): s.LeaderElection.Identity}))
		require.False(t, parsed.Matches(labels.Set{ShardLabel(s.Name): "replica-2"}))
	}
}

// A member that passed relabelNext's check of the agreed view and then
// stalled past its tenure's deadline (a GC pause, a SIGSTOP) before its
// patch reached the transport sends it on waking: the relabel's context
// carries no lease, so the transport's write hook, which refuses a
// reconcile's writes then (scope.NoteWrite), lets it through. The
// guarantee "a paused member does no work on waking" holds for the
// workers' writes and not for the labels.
func TestARelabelIsNotSentOnceItsMembersLeaseIsNoLongerValid(t *testing.T) {
	settings := cacheShareSettings()
	const me, other = "replica-1", "replica-2"
	a := sharding.AgreementOf(me, other)
	var theirs string
	for i := 0; theirs == ""; i++ {
		if name := fmt.Sprintf("w%d", i); a.Owner("ns/"+name) == other {
			theirs = name
		}
	}
	f := newFakeCluster(t)
	c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, settings, noopReconciler())
	var sent []string
	md, err := metadata.NewForConfig(&rest.Config{Host: "https://kube", Transport: apitransport.WriteHooks{Next: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent = append(sent, req.Method+" "+req.URL.Path)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"` + theirs + `","namespace":"ns"}}`))}, nil
	})}})
	require.NoError(t, err)
	c.clients.metadata = md
	lease := &leaseState{}
	sc := &shardCache{
		c: c, label: ShardLabel(settings.Name), id: me, lease: lease,
		agreed: func() (sharding.Agreement, bool) {
			if lease.err != nil {
				return sharding.Agreement{}, false
			}
			// The member passes the check, and then stalls past its
			// deadline before its patch goes out.
			defer func() { lease.err = tenure.ErrLeaseExpired }()
			return a, true
		},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[relabel]()),
	}
	t.Cleanup(sc.queue.ShutDown)
	sc.kinds = []*shareKind{{gvr: widgetGVR, own: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), key: func(obj any) (string, bool) {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		return key, err == nil
	}}}
	require.NoError(t, sc.kinds[0].own.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: theirs, Labels: map[string]string{sc.label: me}}}))
	sc.queue.Add(relabel{0, "ns/" + theirs})
	require.True(t, sc.relabelNext(t.Context()))
	require.Empty(t, sent, "no patch once the member's lease is no longer valid")
}
