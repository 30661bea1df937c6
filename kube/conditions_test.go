package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/api/meta"
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

func conventions(t testing.TB) *statusConventions[widgetSpec, readyStatus] {
	t.Helper()
	sc, err := newStatusConventions(readyWidgets())
	require.NoError(t, err)
	return sc
}

// concludeOn runs the conventions on a reconcile of generation of an
// object whose status was before, that returned status and out.
func concludeOn(t testing.TB, sc *statusConventions[widgetSpec, readyStatus], generation int64, before readyStatus, status *readyStatus, out outcome) (*readyStatus, error) {
	t.Helper()
	b, err := json.Marshal(before)
	require.NoError(t, err)
	return sc.conclude(generation, b, sc.remember(&before), status, out)
}

func TestStatusConventionsByOutcome(t *testing.T) {
	sc := conventions(t)
	for _, tc := range []struct {
		name string
		out  outcome
		want []string
	}{
		{"success", outcome{}, []string{"Ready=True/Reconciled@2"}},
		{"a negative After is none", outcome{after: -time.Second}, []string{"Ready=True/Reconciled@2"}},
		{"After", outcome{after: time.Minute}, []string{"Ready=False/Requeued@2", "Reconciling=True/Requeued@2"}},
		{"Waiting", outcome{waiting: "boom: 1/3 replicas available", after: time.Minute}, []string{"Ready=False/Waiting@2", "Reconciling=True/Waiting@2"}},
		{"an error retried", outcome{err: errors.New("boom")}, []string{"Ready=False/ReconcileFailed@2", "Reconciling=True/ReconcileFailed@2"}},
		{"an error retried, with Waiting", outcome{err: errors.New("boom"), waiting: "boom"}, []string{"Ready=False/ReconcileFailed@2", "Reconciling=True/ReconcileFailed@2"}},
		{"a terminal error", outcome{err: Terminal(errors.New("boom"))}, []string{"Ready=False/TerminalError@2", "Stalled=True/TerminalError@2"}},
		{"a wrapped terminal error", outcome{after: time.Minute, err: fmt.Errorf("wrapped: %w", Terminal(errors.New("boom")))}, []string{"Ready=False/TerminalError@2", "Stalled=True/TerminalError@2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, err := concludeOn(t, sc, 2, readyStatus{ObservedGeneration: 1}, &readyStatus{Seen: 3}, tc.out)
				require.Equal(t, tc.out.err, err, "the error is the Reconciler's")
				require.Equal(t, int64(2), st.ObservedGeneration)
				require.Equal(t, int64(3), st.Seen, "the Reconciler's fields are kept")
				require.Equal(t, tc.want, summary(st.Conditions))
				for _, c := range st.Conditions {
					require.Equal(t, time.Now().UTC(), c.LastTransitionTime.UTC())
					if tc.out.err != nil || tc.out.waiting != "" {
						require.Contains(t, c.Message, "boom")
					}
				}
			})
		})
	}
}

// A failure, then its end: Reconciling and Stalled are removed, not set
// False, as kstatus's abnormal-true conditions; Ready's
// lastTransitionTime moves only when its status does.
func TestStatusConventionsFollowTheOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := conventions(t)
		start := time.Now()
		st, err := concludeOn(t, sc, 1, readyStatus{}, nil, outcome{err: errors.New("boom")})
		require.Error(t, err)
		require.Equal(t, []string{"Ready=False/ReconcileFailed@1", "Reconciling=True/ReconcileFailed@1"}, summary(st.Conditions))

		time.Sleep(time.Minute)
		st, err = concludeOn(t, sc, 1, *st, nil, outcome{err: Terminal(errors.New("bad spec"))})
		require.Error(t, err)
		require.Equal(t, []string{"Ready=False/TerminalError@1", "Stalled=True/TerminalError@1"}, summary(st.Conditions))
		ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
		require.Equal(t, start.UTC(), ready.LastTransitionTime.UTC(), "Ready stayed False")
		require.Equal(t, "bad spec", ready.Message)

		time.Sleep(time.Minute)
		st, err = concludeOn(t, sc, 2, *st, &readyStatus{Seen: 4}, outcome{})
		require.NoError(t, err)
		require.Equal(t, []string{"Ready=True/Reconciled@2"}, summary(st.Conditions), "a status made afresh still has kube's conditions")
		ready = meta.FindStatusCondition(st.Conditions, ConditionReady)
		require.Equal(t, time.Now().UTC(), ready.LastTransitionTime.UTC())
		require.Empty(t, ready.Message)

		// Steady state: the same status, byte for byte, so nothing to apply.
		time.Sleep(time.Minute)
		before, _ := json.Marshal(st)
		again, err := concludeOn(t, sc, 2, *st, &readyStatus{Seen: 4}, outcome{})
		require.NoError(t, err)
		after, _ := json.Marshal(again)
		require.JSONEq(t, string(before), string(after))
		require.Equal(t, string(before), string(after))
	})
}

// The Reconciler's own conditions are its; kube's it may not set.
func TestStatusConventionsRefuseTheReconcilersOwnReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := conventions(t)
		prev, err := concludeOn(t, sc, 1, readyStatus{}, &readyStatus{}, outcome{})
		require.NoError(t, err)

		mine := *prev
		mine.Conditions = append([]metav1.Condition(nil), prev.Conditions...)
		meta.SetStatusCondition(&mine.Conditions, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up"})
		st, err := concludeOn(t, sc, 1, *prev, &mine, outcome{})
		require.NoError(t, err, "another condition type is the Reconciler's")
		require.Equal(t, []string{"Ready=True/Reconciled@1", "Available=True/Up@0"}, summary(st.Conditions))

		mine.ObservedGeneration = 2
		st, err = concludeOn(t, sc, 2, *prev, &mine, outcome{})
		require.NoError(t, err, "the generation kube writes too is no conflict")
		require.Equal(t, int64(2), st.ObservedGeneration)

		for _, typ := range []string{ConditionReady, ConditionReconciling, ConditionStalled} {
			own := readyStatus{Conditions: append([]metav1.Condition(nil), prev.Conditions...)}
			meta.SetStatusCondition(&own.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: "Mine"})
			st, err := concludeOn(t, sc, 1, *prev, &own, outcome{})
			require.True(t, IsTerminal(err), "%s: %v", typ, err)
			require.ErrorContains(t, err, "set the status's condition "+typ+", which kube writes")
			require.Equal(t, []string{"Ready=False/TerminalError@1", "Stalled=True/TerminalError@1"}, summary(st.Conditions), typ)
		}
		st, err = concludeOn(t, sc, 1, *prev, &readyStatus{ObservedGeneration: 7}, outcome{})
		require.True(t, IsTerminal(err))
		require.ErrorContains(t, err, "set the status's observedGeneration")
		require.Equal(t, int64(1), st.ObservedGeneration)
	})
}

func TestTerminalIsAMarkThatUnwraps(t *testing.T) {
	require.NoError(t, Terminal(nil))
	base := errors.New("bad spec")
	err := Terminal(base)
	require.Equal(t, "bad spec", err.Error())
	require.ErrorIs(t, err, base)
	require.True(t, IsTerminal(fmt.Errorf("reconciling: %w", err)))
	require.True(t, IsTerminal(errors.Join(errors.New("other"), err)))
	require.False(t, IsTerminal(base))
	require.False(t, IsTerminal(nil))
}

func TestConditionMessagesAreCutToTheirMaximum(t *testing.T) {
	long := strings.Repeat("é", maxConditionMessage) // two bytes each
	got := conditionMessage(errors.New(long))
	require.LessOrEqual(t, len(got), maxConditionMessage)
	require.True(t, strings.HasSuffix(got, "…"))
	require.True(t, json.Valid([]byte(fmt.Sprintf("%q", got))))
	require.Equal(t, "short", conditionMessage(errors.New("short")))
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
// object's generation, until the controller writes it.
func TestStatusConventionsDefaultTheObservedGeneration(t *testing.T) {
	crd, err := readyWidgets().CRD()
	require.NoError(t, err)
	st := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	require.NotNil(t, st.Default)
	require.JSONEq(t, `{"observedGeneration":0}`, string(st.Default.Raw))

	type required struct {
		Phase              string             `json:"phase"`
		ObservedGeneration int64              `json:"observedGeneration"`
		Conditions         []metav1.Condition `json:"conditions"`
	}
	crd, err = Resource[widgetSpec, required]{
		Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: Namespaced,
		StatusConventions: true,
	}.CRD()
	require.NoError(t, err)
	st = crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	require.JSONEq(t, `{"phase":"","observedGeneration":0}`, string(st.Default.Raw), "a required field has its zero value")

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
