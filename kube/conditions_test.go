package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/internal/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// readyStatus is a Widget's status that holds what StatusConventions
// writes.
type readyStatus struct {
	Seen               int64              `json:"seen,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

type readyWidget = Object[widgetSpec, readyStatus]

func readyWidgets() Resource[widgetSpec, readyStatus] {
	return Resource[widgetSpec, readyStatus]{
		Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: Namespaced,
		StatusConventions: true,
	}
}

// newReadyWidget is newWidget at generation generation, as the API server
// serves it: with status.observedGeneration 0, the CRD's default.
func newReadyWidget(name string, size, generation int64) *unstructured.Unstructured {
	u := newWidget(name, size)
	u.SetGeneration(generation)
	u.Object["status"] = map[string]any{"observedGeneration": int64(0)}
	return u
}

func newReadyWidgetController(t testing.TB, f *fakeCluster, settings Settings, rec ReconcilerFunc[widgetSpec, readyStatus]) *Controller {
	t.Helper()
	c, err := newController(&humus.Setup{}, f.clients(), nil, settings, readyWidgets(), rec)
	require.NoError(t, err)
	return c
}

// conditionsOf decodes the conditions of u's status.
func conditionsOf(t testing.TB, u *unstructured.Unstructured) (observed int64, conditions []metav1.Condition) {
	t.Helper()
	b, err := json.Marshal(u.Object["status"])
	require.NoError(t, err)
	var st readyStatus
	require.NoError(t, json.Unmarshal(b, &st))
	return st.ObservedGeneration, st.Conditions
}

// summary is a status's conditions as "Type=Status/Reason@generation",
// in order.
func summary(conditions []metav1.Condition) []string {
	var out []string
	for _, c := range conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s@%d", c.Type, c.Status, c.Reason, c.ObservedGeneration))
	}
	return out
}

// The exported condition types and reasons are internal/conditions' own.
func TestTheConditionsAreTheInternalOnes(t *testing.T) {
	require.Equal(t,
		[]string{conditions.Ready, conditions.Reconciling, conditions.Stalled, conditions.ReasonReconciled, conditions.ReasonRequeued, conditions.ReasonWaiting, conditions.ReasonTerminalError, conditions.ReasonReconcileFailed},
		[]string{ConditionReady, ConditionReconciling, ConditionStalled, ReasonReconciled, ReasonRequeued, ReasonWaiting, ReasonTerminalError, ReasonReconcileFailed})
	require.True(t, IsTerminal(conditions.Terminal(errors.New("x"))))
	require.True(t, conditions.IsTerminal(Terminal(errors.New("x"))))
}

func TestStatusConventionsNeedTheirFields(t *testing.T) {
	r := Resource[widgetSpec, widgetStatus]{
		Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: Namespaced,
		StatusConventions: true,
	}
	_, err := newController(&humus.Setup{}, newFakeCluster(t).clients(), nil, testSettings(), r,
		ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
			return Result[widgetStatus]{}, nil
		}))
	require.ErrorContains(t, err, "the Status type kube.widgetStatus has no field encoded as conditions")
	require.ErrorContains(t, err, "the Status type kube.widgetStatus has no field encoded as observedGeneration")

	type wrongTypes struct {
		Conditions         []string `json:"conditions"`
		ObservedGeneration string   `json:"observedGeneration"`
	}
	_, err = Resource[widgetSpec, wrongTypes]{
		Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: Namespaced,
		StatusConventions: true,
	}.CRD()
	require.ErrorContains(t, err, "field conditions is []string, not []metav1.Condition")
	require.ErrorContains(t, err, "field observedGeneration is string, not int64")

	// Without StatusConventions, the same Status is fine.
	r.StatusConventions = false
	_, err = r.CRD()
	require.NoError(t, err)
}

// The CRD defaults the status to observedGeneration 0, behind every
// object's generation, until the controller writes it (the default itself
// is internal/crdschema's DefaultStatus, tested there).
func TestStatusConventionsDefaultTheObservedGeneration(t *testing.T) {
	crd, err := readyWidgets().CRD()
	require.NoError(t, err)
	st := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	require.NotNil(t, st.Default)
	require.JSONEq(t, `{"observedGeneration":0}`, string(st.Default.Raw))

	crd, err = widgets().CRD()
	require.NoError(t, err)
	require.Nil(t, crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Default, "only with StatusConventions")
}

// A new object is reconciled once and its status applied once, with kube's
// fields, which don't come back as work (ownwrites.go): the steady state
// is zero writes, through a resync too.
func TestStatusConventionsSettleAtZeroWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newReadyWidget("w1", 3, 1))
		settings := testSettings()
		settings.Resync = 2 * time.Minute
		var calls atomic.Int32
		c := newReadyWidgetController(t, f, settings, func(ctx context.Context, w readyWidget) (Result[readyStatus], error) {
			calls.Add(1)
			st := w.Status
			st.Seen = w.Spec.Size
			return Result[readyStatus]{Status: &st}, nil
		})
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 1, calls.Load(), "kube's own status write isn't work")
		applies := f.statusApplies()
		require.Len(t, applies, 1)
		require.Equal(t, controllerName, applies[0].fieldManager, "under the controller's field manager")
		require.True(t, applies[0].force)
		observed, conds := conditionsOf(t, f.get(t, widgetGVR, testNamespace, "w1"))
		require.Equal(t, int64(1), observed)
		require.Equal(t, []string{"Ready=True/Reconciled@1"}, summary(conds))

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		require.Greater(t, calls.Load(), int32(1), "the resync reconciles it again")
		require.Len(t, f.statusApplies(), 1, "and writes nothing")

		// A new generation is observed once reconciled.
		u := f.get(t, widgetGVR, testNamespace, "w1")
		u.SetGeneration(2)
		require.NoError(t, unstructured.SetNestedField(u.Object, int64(4), "spec", "size"))
		f.update(t, widgetGVR, u)
		synctest.Wait()
		require.Len(t, f.statusApplies(), 2)
		observed, conds = conditionsOf(t, f.get(t, widgetGVR, testNamespace, "w1"))
		require.Equal(t, int64(2), observed)
		require.Equal(t, []string{"Ready=True/Reconciled@2"}, summary(conds))
		require.NoError(t, s.stop(t))
	})
}

// A nil Result.Status leaves the Reconciler's fields alone, and still has
// kube write its own.
func TestStatusConventionsWithANilStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newReadyWidget("w1", 3, 1)
		w.Object["status"] = map[string]any{"seen": int64(9), "observedGeneration": int64(0)}
		f := newFakeCluster(t, w)
		c := newReadyWidgetController(t, f, testSettings(), func(ctx context.Context, w readyWidget) (Result[readyStatus], error) {
			return Result[readyStatus]{}, nil
		})
		s := serve(t, c)
		synctest.Wait()
		require.Len(t, f.statusApplies(), 1)
		u := f.get(t, widgetGVR, testNamespace, "w1")
		require.Equal(t, int64(9), u.Object["status"].(map[string]any)["seen"])
		_, conds := conditionsOf(t, u)
		require.Equal(t, []string{"Ready=True/Reconciled@1"}, summary(conds))
		require.NoError(t, s.stop(t))
	})
}

// An error is retried, Reconciling True; the success after it ends
// Reconciling; a Terminal error isn't retried, Stalled True.
func TestStatusConventionsThroughRetriesAndATerminalError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newReadyWidget("w1", 3, 1))
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		settings.RetryMaxDelay = time.Second
		var fail atomic.Pointer[error]
		setFail := func(err error) { fail.Store(&err) }
		setFail(errors.New("not yet"))
		var calls atomic.Int32
		c := newReadyWidgetController(t, f, settings, func(ctx context.Context, w readyWidget) (Result[readyStatus], error) {
			calls.Add(1)
			return Result[readyStatus]{}, *fail.Load()
		})
		s := serve(t, c)
		synctest.Wait()
		_, conds := conditionsOf(t, f.get(t, widgetGVR, testNamespace, "w1"))
		require.Equal(t, []string{"Ready=False/ReconcileFailed@1", "Reconciling=True/ReconcileFailed@1"}, summary(conds))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Greater(t, calls.Load(), int32(5), "retried")
		require.Len(t, f.statusApplies(), 1, "the same failure is written once")

		setFail(nil)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		_, conds = conditionsOf(t, f.get(t, widgetGVR, testNamespace, "w1"))
		require.Equal(t, []string{"Ready=True/Reconciled@1"}, summary(conds))

		setFail(Terminal(errors.New("size 4 is refused")))
		u := f.get(t, widgetGVR, testNamespace, "w1")
		u.SetGeneration(2)
		f.update(t, widgetGVR, u)
		synctest.Wait()
		n := calls.Load()
		_, conds = conditionsOf(t, f.get(t, widgetGVR, testNamespace, "w1"))
		require.Equal(t, []string{"Ready=False/TerminalError@2", "Stalled=True/TerminalError@2"}, summary(conds))
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, n, calls.Load(), "a Terminal error isn't retried")
		require.NoError(t, s.stop(t))
	})
}

// Terminal works without StatusConventions too: not retried.
func TestTerminalErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		var calls atomic.Int32
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				calls.Add(1)
				return Result[widgetStatus]{After: time.Second}, Terminal(errors.New("bad spec"))
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 1, calls.Load(), "neither the backoff nor After retries it")
		require.NoError(t, s.stop(t))
	})
}

// statusConventions.conclude, kube's side of internal/conditions' Conclude,
// as the tests moved there no longer run it: it hands Conclude the
// observedGeneration the Reconciler left, sets it to the object's
// generation after, and, for a Reconciler that returned no status, starts
// from the object's status as it was before the reconcile.
func TestStatusConventionsConcludeOnTheStatusToApply(t *testing.T) {
	sc, err := newStatusConventions(readyWidgets())
	require.NoError(t, err)
	prevOf := func(st readyStatus) ([]byte, conditions.Previous) {
		b, err := json.Marshal(st)
		require.NoError(t, err)
		return b, conditions.Remember(st.Conditions, st.ObservedGeneration)
	}

	b, prev := prevOf(readyStatus{Seen: 1, ObservedGeneration: 1})
	st, err := sc.conclude(2, b, prev, nil, conditions.Outcome{})
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Seen, "the object's status as it was")
	require.Equal(t, int64(2), st.ObservedGeneration)
	require.Equal(t, []string{"Ready=True/Reconciled@2"}, summary(st.Conditions))

	b, prev = prevOf(*st)
	st, err = sc.conclude(3, b, prev, &readyStatus{Seen: 5, ObservedGeneration: 7}, conditions.Outcome{})
	require.True(t, IsTerminal(err), "%v", err)
	require.ErrorContains(t, err, "the Reconciler of Widget set the status's observedGeneration")
	require.Equal(t, int64(5), st.Seen, "the Reconciler's status")
	require.Equal(t, int64(3), st.ObservedGeneration, "kube's, not the Reconciler's")
	require.Equal(t, []string{"Ready=False/TerminalError@3", "Stalled=True/TerminalError@3"}, summary(st.Conditions))

	st, err = sc.conclude(3, []byte(`{"seen":"x"}`), prev, nil, conditions.Outcome{Err: errors.New("boom")})
	require.Nil(t, st)
	require.ErrorContains(t, err, "boom")
	require.ErrorContains(t, err, "kube: decoding the status of a Widget")
}
