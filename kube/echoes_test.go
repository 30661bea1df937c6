package kube

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

func TestANewObjectWithAFinalizerIsReconciledOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		var reconciles counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add(w.Name)
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}),
			Finalize(widgetFinalizer, func(context.Context, widget) error { return nil }))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.Len(t, f.metadataApplies(), 1, "the finalizer is added")
		require.Len(t, f.statusApplies(), 1, "the status is applied")
		require.Equal(t, map[string]int{"w1": 1}, reconciles.get(), "neither write comes back as work")
		require.NoError(t, s.stop(t))
	})
}

func TestAnotherWritersStatusOrFinalizerReturnedByANoOpApplyIsQueued(t *testing.T) {
	for _, tc := range []struct {
		name        string
		subresource string // the apply that finds the other writer's change
		change      func(u *unstructured.Unstructured)
	}{
		{"another manager's finalizer, by the status apply", "status", func(u *unstructured.Unstructured) {
			u.SetFinalizers(append(u.GetFinalizers(), "other.example.com/keep"))
		}},
		{"a status field the status apply didn't write", "status", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "set by another writer", "status", "message")
		}},
		{"the status, by the finalizer's apply", "", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "set by another writer", "status", "message")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeCluster(t, newWidget("w1", 3))
				var once sync.Once
				f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
					if action.GetSubresource() != tc.subresource {
						return false, nil, nil
					}
					handled := false
					var obj runtime.Object
					var err error
					once.Do(func() {
						// The apply writes what is there already, and
						// another writer's change lands first: the
						// answer is that change's version.
						handled = true
						var apply unstructured.Unstructured
						if err = apply.UnmarshalJSON(action.(clienttesting.PatchActionImpl).GetPatch()); err != nil {
							return
						}
						u := f.get(t, widgetGVR, testNamespace, "w1").DeepCopy()
						if tc.subresource == "status" {
							u.Object["status"] = apply.Object["status"]
						} else {
							u.SetFinalizers(apply.GetFinalizers())
						}
						tc.change(u)
						u.SetResourceVersion("another-writer")
						obj, err = u, f.dynamic.Tracker().Update(widgetGVR, u, testNamespace)
					})
					return handled, obj, err
				})
				var reconciles counter
				c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
					ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
						reconciles.add(w.Name)
						return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size, Message: w.Status.Message}}, nil
					}),
					Finalize(widgetFinalizer, func(context.Context, widget) error { return nil }))
				s := serve(t, c)
				synctest.Wait()
				time.Sleep(time.Minute)
				synctest.Wait()

				require.Equal(t, map[string]int{"w1": 2}, reconciles.get(), "the other writer's change reconciles once more")
				require.NoError(t, s.stop(t))
			})
		})
	}
}
