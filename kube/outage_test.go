package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAnOutageUnderChurnLeavesNoObjectAtItsBackoffsCap is issue 24's RBAC
// outage: every reconcile is refused 403 for 40s, while two Widgets change
// every second, one changes once and one not at all. Before the fix, each
// busy Widget's backoff climbed with each failure to RetryMaxDelay, and it
// waited that long after the API server came back. Now each converges
// within seconds of the first success, with no more reconciles during the
// outage than before (measured 246 before).
func TestAnOutageUnderChurnLeavesNoObjectAtItsBackoffsCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := []string{"busy-1", "busy-2", "once", "quiet"}
		var objs []runtime.Object
		for _, n := range names {
			objs = append(objs, newWidget(n, 1))
		}
		f := newFakeCluster(t, objs...)
		var down atomic.Bool
		var during atomic.Int32
		var mu sync.Mutex
		seen := map[string]int64{}
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if down.Load() {
					during.Add(1)
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC: the ClusterRoleBinding is gone"))
				}
				mu.Lock()
				defer mu.Unlock()
				seen[w.Name] = w.Spec.Size
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()

		down.Store(true)
		resize := func(name string, size int64) {
			u := f.get(t, widgetGVR, testNamespace, name)
			u.Object["spec"] = map[string]any{"size": size}
			f.update(t, widgetGVR, u)
		}
		want := map[string]int64{"busy-1": 1, "busy-2": 1, "once": 2, "quiet": 1}
		for i := range 40 {
			if i == 1 {
				resize("once", 2)
			}
			for _, n := range []string{"busy-1", "busy-2"} {
				want[n] = int64(i + 2)
				resize(n, want[n])
			}
			time.Sleep(time.Second)
		}
		down.Store(false)
		restored := time.Now()
		t.Logf("reconciles during the 40s outage: %d", during.Load())
		require.LessOrEqual(t, during.Load(), int32(113), "reconciles during the outage: 113 before the fix")

		converged := func() bool {
			mu.Lock()
			defer mu.Unlock()
			for n, size := range want {
				if seen[n] != size {
					return false
				}
			}
			return true
		}
		for !converged() && time.Since(restored) < 10*time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(restored)
		t.Logf("every Widget converged %v after the outage ended", took)
		require.Less(t, took, 30*time.Second, "every Widget converged within 30s of the outage's end: %v", seen)
		require.NoError(t, s.stop(t))
	})
}

func TestAnObjectFailingAloneWhileOthersSucceedIsBackedOffOnItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("bad", 1), newWidget("good", 1))
		var bad times
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if w.Name == "bad" {
					bad.add()
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC: not in this namespace"))
				}
				return Result[widgetStatus]{After: 100 * time.Millisecond}, nil
			}))
		s := serve(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		// From 5ms doubling: 2^14 * 5ms is 82s, so 14 tries in a minute.
		n := len(bad.get())
		t.Logf("the failing Widget's reconciles in a minute: %d", n)
		require.LessOrEqual(t, n, 15)
		require.NoError(t, s.stop(t))
	})
}

// A probe whose reconcile panics in an outage hands the probe on, as one
// failing on its own does: settle's panic branch forgot the key and never
// told the outage, so the other held keys waited for a success that no
// reconcile was left to make (found by this round's breaker).
func TestAProbeThatPanicsHandsTheProbeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("a", 1), newWidget("b", 1))
		var down, panicked atomic.Bool
		down.Store(true)
		var c *Controller
		isProbe := func(key string) bool { return c.outage.Probing(key) }
		var mu sync.Mutex
		succeeded := map[string]bool{}
		c = newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				key := w.Namespace + "/" + w.Name
				if down.Load() {
					if isProbe(key) && panicked.CompareAndSwap(false, true) {
						panic("the probe's own bug")
					}
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC"))
				}
				mu.Lock()
				defer mu.Unlock()
				succeeded[w.Name] = true
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		start := time.Now()
		for !panicked.Load() {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			require.Less(t, time.Since(start), 5*time.Minute, "no probe was ever reconciled")
		}
		down.Store(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		ok, seen := succeeded["a"] || succeeded["b"], fmt.Sprint(succeeded)
		mu.Unlock()
		require.True(t, ok, "a held key was reconciled once the API server was back: %s", seen)
		require.NoError(t, s.stop(t))
	})
}
