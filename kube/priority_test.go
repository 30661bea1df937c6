package kube

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAChangeGoesAheadOfTheInitialList is issue 30's user who changes an
// object while a controller that just started works through its initial
// list: with one worker, the first of 50 Widgets in reconcile, a user
// changes one further down and creates one. Before the priority queue,
// both waited behind the whole list (FIFO); now each is reconciled next,
// and the list after them. The queue's depth and duration say by
// priority where the keys waited.
func TestAChangeGoesAheadOfTheInitialList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		var objs []runtime.Object
		for i := range n {
			objs = append(objs, newWidget(fmt.Sprintf("w%02d", i), 1))
		}
		f := newFakeCluster(t, objs...)
		gate := make(chan struct{})
		var mu sync.Mutex
		var order []string
		rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s@%d", w.Name, w.Spec.Size))
			first := len(order) == 1
			mu.Unlock()
			if first {
				<-gate
			}
			return Result[widgetStatus]{}, nil
		})
		tel := humustest.NewTelemetry(t)
		s := testSettings()
		s.Workers = 1
		c := newWidgetController(t, f, tel.Telemetry, s, rec)
		sv := serve(t, c)
		synctest.Wait()
		require.EqualValues(t, n-1, priorityValue(t, tel, "humus.kube.controller.queue.depth", "low"), "the initial list waits at low priority")

		u := f.get(t, widgetGVR, testNamespace, "w40").DeepCopy()
		u.Object["spec"] = map[string]any{"size": int64(2)}
		u.SetResourceVersion("changed")
		f.update(t, widgetGVR, u)
		f.create(t, widgetGVR, newWidget("new", 3))
		synctest.Wait()
		require.EqualValues(t, 2, priorityValue(t, tel, "humus.kube.controller.queue.depth", "normal"), "the changes wait at normal priority")
		close(gate)
		time.Sleep(time.Minute)
		synctest.Wait()

		mu.Lock()
		got := append([]string(nil), order...)
		mu.Unlock()
		require.Len(t, got, n+1, "every Widget once, w40 once, at its change")
		require.Equal(t, []string{"w40@2", "new@3"}, got[1:3], "the changes go next: %v", got)
		require.NotContains(t, got[3:], "w40@1")
		require.NoError(t, sv.stop(t))
	})
}

// priorityValue is the sum of the metric name's data points at the queue
// priority p.
func priorityValue(t testing.TB, tel *humustest.Telemetry, name, p string) int64 {
	t.Helper()
	m, ok := tel.Metric(instrumentationScope, name)
	require.True(t, ok, name)
	var v int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if got, _ := dp.Attributes.Value("humus.kube.controller.queue.priority"); got.AsString() == p {
			v += dp.Value
		}
	}
	return v
}
