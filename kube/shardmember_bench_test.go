package kube

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/tenure"
)

// benchMember is an active member of three, "b" of a, b and c, whose
// cache holds n Widgets.
func benchMember(b *testing.B, n int) *member {
	b.Helper()
	inst, err := newShardInstruments(noop.NewMeterProvider().Meter(""))
	if err != nil {
		b.Fatal(err)
	}
	objects := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
	for i := range n {
		if err := objects.Add(newWidget(fmt.Sprintf("w%d", i), 1)); err != nil {
			b.Fatal(err)
		}
	}
	m := &member{
		id:       "b",
		objects:  objects,
		inst:     inst,
		attrs:    controllerAttr("bench"),
		Tenure:   tenure.New(b.Context(), time.Minute, func() {}),
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
	w := newWidget("new", 1)
	b.ReportAllocs()
	for b.Loop() {
		m.countObject(w, true)
		m.countObject(w, false)
	}
}

// walkCount is how many of the member's cached keys are its own in v.
func walkCount(m *member, v view) int {
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
	m := &member{
		id: "b", objects: objects, inst: inst, attrs: controllerAttr("test"),
		Tenure: tenure.New(t.Context(), time.Minute, func() {}),
		acked:  newView([]string{"a", "b", "c"}), active: true,
		mine: map[uint64]struct{}{},
	}
	add := func(i int) {
		w := newWidget(fmt.Sprintf("w%d", i), 1)
		if err := objects.Add(w); err != nil {
			t.Fatal(err)
		}
		m.countObject(w, true)
	}
	del := func(i int) {
		w := newWidget(fmt.Sprintf("w%d", i), 1)
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
