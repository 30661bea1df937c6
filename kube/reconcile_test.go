package kube

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// The spec's "two reconciles in all" was the object's, then its own
// status apply's, handed back by the informer. That apply's event is now
// the controller's own write, which isn't queued (internal/echoes): one.
func TestNewObjectIsReconciledOnceAndSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		var calls atomic.Int32
		c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				calls.Add(1)
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.EqualValues(t, 1, calls.Load(), "once for the object, and not again for its own status")
		applies := f.statusApplies()
		require.Len(t, applies, 1)
		require.Equal(t, controllerName, applies[0].fieldManager)
		require.True(t, applies[0].force)
		require.Equal(t, map[string]any{"seen": int64(3)}, f.get(t, widgetGVR, testNamespace, "w1").Object["status"])

		require.NoError(t, s.stop(t))
	})
}

func TestAfterReconcilesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		var reconciles times
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add()
				return Result[widgetStatus]{After: 30 * time.Second}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		start := time.Now()
		time.Sleep(95 * time.Second)
		synctest.Wait()

		at := reconciles.get()
		require.Len(t, at, 4, "at once, then after 30s, 60s and 90s")
		for i := 1; i < len(at); i++ {
			require.Equal(t, 30*time.Second, at[i].Sub(at[i-1]))
		}
		require.True(t, !at[0].After(start))
		require.NoError(t, s.stop(t))
	})
}

func TestNilStatusLeavesStatusAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 3)
		w.Object["status"] = map[string]any{"seen": int64(1), "message": "set by someone"}
		f := newFakeCluster(t, w)
		var calls atomic.Int32
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				calls.Add(1)
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()

		require.EqualValues(t, 1, calls.Load())
		require.Empty(t, f.statusApplies())
		require.Equal(t, map[string]any{"seen": int64(1), "message": "set by someone"}, f.get(t, widgetGVR, testNamespace, "w1").Object["status"])
		require.NoError(t, s.stop(t))
	})
}

func TestStatusIsAppliedWhenReconcileFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		settings := testSettings()
		settings.RetryBaseDelay = time.Hour
		settings.RetryMaxDelay = time.Hour
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{Status: &widgetStatus{Message: "apply failed"}}, errors.New("apply failed")
			}))
		s := serve(t, c)
		synctest.Wait()

		require.Len(t, f.statusApplies(), 1)
		require.Equal(t, map[string]any{"message": "apply failed"}, f.get(t, widgetGVR, testNamespace, "w1").Object["status"])
		require.NoError(t, s.stop(t))
	})
}

func TestFailedReconcileBacksOffDoubling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		settings.RetryMaxDelay = 8 * time.Second
		var reconciles times
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add()
				return Result[widgetStatus]{}, errors.New("not yet")
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(40 * time.Second)
		synctest.Wait()

		at := reconciles.get()
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, at[i].Sub(at[i-1]))
		}
		require.GreaterOrEqual(t, len(gaps), 6)
		require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}, gaps[:5],
			"from RetryBaseDelay, doubling to RetryMaxDelay")
		require.NoError(t, s.stop(t))
	})
}

func TestUndecodableObjectIsAnErrorNamingTheFieldAndOthersGoOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := newWidget("bad", 0)
		bad.Object["spec"] = map[string]any{"size": "three"}
		f := newFakeCluster(t, bad, newWidget("good", 2))
		tel := humustest.NewTelemetry(t)
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		var mu sync.Mutex
		seen := map[string]int{}
		c := newWidgetController(t, f, tel.Telemetry, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.Lock()
				seen[w.Name]++
				mu.Unlock()
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()

		mu.Lock()
		require.Equal(t, map[string]int{"good": 1}, seen)
		mu.Unlock()
		failed := recordsWithBody(tel, "reconcile failed")
		require.Len(t, failed, 3, "retried with backoff: at once, after 1s and after 2s more")
		msg := attrs(failed[0])["exception.message"]
		require.Contains(t, msg, "Widget default/bad")
		require.Contains(t, msg, "spec.size")
		require.NoError(t, s.stop(t))
	})
}

func TestDecodeIsTheReconcilersOwnCopyWithoutManagedFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		var mu sync.Mutex
		var got []widget
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.Lock()
				got = append(got, w)
				n := len(got)
				mu.Unlock()
				w.Spec.Size = 100
				w.Labels = map[string]string{"changed": "yes"}
				if n == 1 {
					return Result[widgetStatus]{After: time.Second}, nil
				}
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 2)
		for _, w := range got {
			require.EqualValues(t, 3, w.Spec.Size, "a change to one decode doesn't reach the cache")
			require.Empty(t, w.Labels)
			require.Empty(t, w.ManagedFields, "the informer's transform keeps managed fields out of the cache")
			require.Equal(t, "Widget", w.Kind)
			require.Equal(t, "test.example.com/v1", w.APIVersion)
		}
		require.NoError(t, s.stop(t))
	})
}

// looseWidget is a Kind's type with an interface field, which a CRD's
// schema can't describe but a type defined elsewhere can have.
type looseWidget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Extra map[string]any `json:"extra"`
	} `json:"spec"`
}

func TestDecodeCopiesInterfaceFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.Object["spec"] = map[string]any{"extra": map[string]any{"nested": map[string]any{"v": "cache"}}}
		f := newFakeCluster(t, w)
		var mu sync.Mutex
		var seen []string
		c, err := newKindController(&humus.Setup{}, f.clients(), nil, testSettings(),
			Kind[looseWidget]{GVR: widgetGVR, Kind: "Widget", Scope: Namespaced},
			KindReconcilerFunc[looseWidget](func(ctx context.Context, obj looseWidget) (time.Duration, error) {
				nested := obj.Spec.Extra["nested"].(map[string]any)
				mu.Lock()
				seen = append(seen, nested["v"].(string))
				n := len(seen)
				mu.Unlock()
				nested["v"] = "changed by the Reconciler"
				if n == 1 {
					return time.Second, nil
				}
				return 0, nil
			}))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []string{"cache", "cache"}, seen, "an interface field is a copy, not the cache's value")
		mu.Unlock()
		require.NoError(t, s.stop(t))
	})
}

func TestWorkersNeverReconcileOneKeyTwiceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 1))
		settings := testSettings()
		settings.Workers = 4
		var mu sync.Mutex
		inFlight := map[string]int{}
		most, mostOfOne, calls := 0, 0, 0
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.Lock()
				calls++
				inFlight[w.Name]++
				total := 0
				for _, n := range inFlight {
					total += n
				}
				most, mostOfOne = max(most, total), max(mostOfOne, inFlight[w.Name])
				mu.Unlock()
				time.Sleep(time.Second)
				mu.Lock()
				inFlight[w.Name]--
				mu.Unlock()
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		// Change w1 twice while its first reconcile is in flight.
		for size := range int64(2) {
			u := f.get(t, widgetGVR, testNamespace, "w1").DeepCopy()
			require.NoError(t, unstructured.SetNestedField(u.Object, size+2, "spec", "size"))
			f.update(t, widgetGVR, u)
			synctest.Wait()
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 2, most, "two keys are reconciled at once")
		require.Equal(t, 1, mostOfOne, "one key never is")
		require.Equal(t, 3, calls, "w1's two changes while it ran queue it once more")
		require.NoError(t, s.stop(t))
	})
}

func TestSettingsNamespaceLimitsTheController(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		elsewhere := newWidget("w2", 2)
		elsewhere.SetNamespace("team-a")
		f := newFakeCluster(t, newWidget("w1", 1), elsewhere)
		settings := testSettings()
		settings.Namespace = "team-a"
		var seen counter
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				seen.add(w.Namespace + "/" + w.Name)
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, map[string]int{"team-a/w2": 1}, seen.get())
		require.NoError(t, s.stop(t))
	})
}

// narrowWidget is a Kind's type whose size is an int32, so a number the
// cache holds can be too large for it.
type narrowWidget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Size  int32 `json:"size"`
		Small uint8 `json:"small,omitempty"`
	} `json:"spec"`
}

func TestNumberTooLargeForItsFieldIsAnErrorNotAWrappedValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		huge := newWidget("huge", 1<<40)
		negative := newWidget("negative", 1)
		negative.Object["spec"] = map[string]any{"size": int64(1), "small": int64(-1)}
		f := newFakeCluster(t, huge, negative, newWidget("good", 2))
		tel := humustest.NewTelemetry(t)
		settings := testSettings()
		settings.RetryBaseDelay = time.Hour
		settings.RetryMaxDelay = time.Hour
		var seen counter
		c, err := newKindController(&humus.Setup{Telemetry: tel.Telemetry}, f.clients(), nil, settings,
			Kind[narrowWidget]{GVR: widgetGVR, Kind: "Widget", Scope: Namespaced},
			KindReconcilerFunc[narrowWidget](func(ctx context.Context, obj narrowWidget) (time.Duration, error) {
				seen.add(obj.Name)
				return 0, nil
			}))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()

		require.Equal(t, map[string]int{"good": 1}, seen.get(), "a number that doesn't fit its field is never handed over wrapped")
		failed := recordsWithBody(tel, "reconcile failed")
		require.Len(t, failed, 2)
		var msgs []string
		for _, rec := range failed {
			msgs = append(msgs, attrs(rec)["exception.message"])
		}
		require.Contains(t, strings.Join(msgs, "\n"), "Widget default/huge: field spec.size")
		require.Contains(t, strings.Join(msgs, "\n"), "Widget default/negative: field spec.small")
		require.NoError(t, s.stop(t))
	})
}

func TestStatusApplyErrorSurfacesInOneRecordWithReconcilesError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
			if action.GetSubresource() == "status" {
				return true, nil, errors.New("etcd is full")
			}
			return false, nil, nil
		})
		tel := humustest.NewTelemetry(t)
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		settings.RetryMaxDelay = time.Second
		var calls atomic.Int32
		c := newWidgetController(t, f, tel.Telemetry, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if calls.Add(1) == 1 {
					return Result[widgetStatus]{Status: &widgetStatus{Message: "degraded"}, After: time.Hour}, errors.New("the cloud is down")
				}
				return Result[widgetStatus]{Status: &widgetStatus{Seen: 3}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()

		failed := recordsWithBody(tel, "reconcile failed")
		require.Len(t, failed, 2, "one WARN per failed reconcile: the first fails twice over, the second's status apply fails")
		first, second := attrs(failed[0])["exception.message"], attrs(failed[1])["exception.message"]
		require.Contains(t, first, "the cloud is down")
		require.Contains(t, first, "kube: applying the status of Widget default/w1: etcd is full")
		require.NotContains(t, second, "the cloud is down")
		require.Contains(t, second, "etcd is full")
		require.EqualValues(t, 2, calls.Load(), "a failed status apply retries with backoff, not After")
		require.NoError(t, s.stop(t))
	})
}

func TestNegativeAfterIsZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var kindCalls, calls atomic.Int32
		kc, err := newKindController(&humus.Setup{}, f.clients(), nil, testSettings(),
			Kind[looseWidget]{GVR: widgetGVR, Kind: "Widget", Scope: Namespaced},
			KindReconcilerFunc[looseWidget](func(ctx context.Context, obj looseWidget) (time.Duration, error) {
				kindCalls.Add(1)
				return -time.Second, nil
			}))
		require.NoError(t, err)
		settings := testSettings()
		settings.LeaderElection.Namespace = "other"
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				calls.Add(1)
				return Result[widgetStatus]{After: -time.Second}, nil
			}))
		s1, s2 := serve(t, kc), serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 1, kindCalls.Load(), "a negative after waits for a change, as zero does")
		require.EqualValues(t, 1, calls.Load(), "a negative Result.After waits for a change, as zero does")
		require.NoError(t, s1.stop(t))
		require.NoError(t, s2.stop(t))
	})
}
