package sharding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

const (
	testNamespace  = "default"
	leaseNamespace = "kube-system"
	controllerName = "widget-controller"
)

// durations are kube's default LeaderElection's.
var durations = Durations{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// newObject is an object of the resource, as the member's cache holds it.
func newObject(name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: types.UID("uid-" + name)}}
}

func testAttrs(name string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("humus.kube.controller.name", name)))
}

var (
	errTestExpired  = errors.New("test: the tenure's deadline passed")
	errTestReleased = errors.New("test: the tenure was released")
	errTestNotBegun = errors.New("test: the tenure hasn't begun")
)

// testTenure is a Tenure that reads its deadline from the clock only, as
// kube's does when its timer fires late (kube's tenure and its adapter
// are tested in kube).
type testTenure struct {
	renewDeadline time.Duration
	ctx           context.Context
	cancel        context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	begun    bool
	lost     error
}

func newTestTenure(renewDeadline time.Duration) *testTenure {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &testTenure{renewDeadline: renewDeadline, ctx: ctx, cancel: cancel}
}

func (t *testTenure) Context() context.Context { return t.ctx }

func (t *testTenure) Renewed(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !start.Before(t.deadline) {
		t.loseLocked(errTestExpired)
	}
	if t.lost == nil {
		t.deadline = start.Add(t.renewDeadline)
	}
}

func (t *testTenure) Commence() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begun = true
}

func (t *testTenure) Lose(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loseLocked(cause)
}

func (t *testTenure) loseLocked(cause error) {
	if t.lost == nil {
		t.lost = cause
		t.cancel(cause)
	}
}

func (t *testTenure) Release() { t.Lose(errTestReleased) }

func (t *testTenure) LostErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

func (t *testTenure) Current() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !time.Now().Before(t.deadline) {
		t.loseLocked(errTestExpired)
	}
	return t.lost
}

func (t *testTenure) Valid() error {
	if err := t.Current(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.begun {
		return errTestNotBegun
	}
	return nil
}

// benchMember is an active member of three, "b" of a, b and c, whose
// cache holds n objects.
func benchMember(b *testing.B, n int) *Member {
	b.Helper()
	inst, err := newShardInstruments(noop.NewMeterProvider().Meter(""))
	if err != nil {
		b.Fatal(err)
	}
	objects := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
	for i := range n {
		if err := objects.Add(newObject(fmt.Sprintf("w%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	m := &Member{
		id:       "b",
		objects:  objects,
		inst:     inst,
		attrs:    testAttrs("bench"),
		tenure:   newTestTenure(time.Minute),
		inflight: map[string]*take{},
		peers:    map[string]*peer{},
		acked:    newView([]string{"a", "b", "c"}),
		active:   true,
		mine:     map[uint64]struct{}{},
	}
	return m
}

// BenchmarkShardGauges is what the sharding gauges cost a member whose
// cache holds 5,000 objects, on every reconcile's end (record, after its
// step): before issue 30 a walk of every key, hashing each against every
// member.
func BenchmarkShardGauges(b *testing.B) {
	m := benchMember(b, 5000)
	ctx := context.Background()
	m.record(ctx)
	b.ReportAllocs()
	for b.Loop() {
		m.record(ctx)
	}
}

// BenchmarkShardGaugesObjectChange is what an object added to the cache
// and deleted from it costs the gauges' count, kept since issue 30.
func BenchmarkShardGaugesObjectChange(b *testing.B) {
	m := benchMember(b, 5000)
	m.record(context.Background())
	w := newObject("new")
	b.ReportAllocs()
	for b.Loop() {
		m.countObject(w, true)
		m.countObject(w, false)
	}
}

// walkCount is how many of the member's cached keys are its own in v.
func walkCount(m *Member, v view) int {
	n := 0
	for _, key := range m.objects.ListKeys() {
		if v.owner(key) == m.id {
			n++
		}
	}
	return n
}

// TestTheShardKeysGaugeKeepsItsCount checks the count record keeps, by
// the informer's adds and deletes, against a walk of the cache's keys,
// through adds, deletes, a repeated add, and a view change.
func TestTheShardKeysGaugeKeepsItsCount(t *testing.T) {
	inst, err := newShardInstruments(noop.NewMeterProvider().Meter(""))
	if err != nil {
		t.Fatal(err)
	}
	objects := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
	m := &Member{
		id: "b", objects: objects, inst: inst, attrs: testAttrs("test"),
		tenure: newTestTenure(time.Minute),
		acked:  newView([]string{"a", "b", "c"}), active: true,
		mine: map[uint64]struct{}{},
	}
	add := func(i int) {
		w := newObject(fmt.Sprintf("w%d", i))
		if err := objects.Add(w); err != nil {
			t.Fatal(err)
		}
		m.countObject(w, true)
	}
	del := func(i int) {
		w := newObject(fmt.Sprintf("w%d", i))
		if err := objects.Delete(w); err != nil {
			t.Fatal(err)
		}
		m.countObject(cache.DeletedFinalStateUnknown{Key: testNamespace + "/" + w.GetName(), Obj: w}, false)
	}
	for i := range 100 {
		add(i)
	}
	m.record(t.Context())
	if got, want := len(m.mine), walkCount(m, m.acked); got != want || want == 0 {
		t.Fatalf("after the first count: %d, want %d", got, want)
	}
	for i := 100; i < 300; i++ {
		add(i)
	}
	add(5) // an add the count saw already
	for i := 0; i < 300; i += 3 {
		del(i)
	}
	m.record(t.Context())
	if got, want := len(m.mine), walkCount(m, m.acked); got != want {
		t.Fatalf("after adds and deletes: %d, want %d", got, want)
	}
	m.acked = newView([]string{"a", "b"})
	add(1000) // under a view not counted yet
	m.record(t.Context())
	if got, want := len(m.mine), walkCount(m, m.acked); got != want {
		t.Fatalf("after a view change: %d, want %d", got, want)
	}
}

// TestAMemberPastItsDeadlineDoesntRenew renews a member's Lease after a
// pause past LeaseDuration, when its renewal's timer fires before its
// deadline's (as after SIGSTOP, a frozen VM or CPU starvation): the
// renewal is not sent, and the member has lost its Lease. It used to
// succeed, and the member worked on with a fresh deadline while the
// others had taken its keys. kube's TestAMembersTenurePastItsDeadline
// checks that its tenure, its timer stopped, says so by the clock.
func TestAMemberPastItsDeadlineDoesntRenew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := kubefake.NewClientset()
		tn := newTestTenure(durations.RenewDeadline)
		m := &Member{
			id: "m1", instance: "instance-1", name: controllerName, leaseName: controllerName + "-m1",
			ns: leaseNamespace, le: durations, leases: client.CoordinationV1().Leases(leaseNamespace),
			tenure: tn,
		}
		ctx := context.Background()
		require.NoError(t, m.create(ctx))
		require.NoError(t, m.write(ctx, newView([]string{"m1"})), "a renewal within the deadline")
		require.NoError(t, tn.Valid())
		renewed := client.Actions()

		// The process pauses past LeaseDuration; on waking, the renewal's
		// timer runs before the deadline's.
		time.Sleep(durations.LeaseDuration + time.Second)
		require.ErrorIs(t, m.write(ctx, newView([]string{"m1"})), errTestExpired)
		require.ErrorIs(t, tn.LostErr(), errTestExpired, "the member works on")
		require.Len(t, client.Actions(), len(renewed), "a renewal was sent past the deadline")
	})
}
