package conditions

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readyStatus is a Widget's status that holds what StatusConventions
// writes.
type readyStatus struct {
	Seen               int64              `json:"seen,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// concludeOn concludes, as kube's status conventions do, a reconcile of
// generation of an object whose status was before, that returned status
// (nil to keep the object's, decoded afresh) and out.
func concludeOn(t testing.TB, generation int64, before readyStatus, status *readyStatus, out Outcome) (*readyStatus, error) {
	t.Helper()
	b, err := json.Marshal(before)
	require.NoError(t, err)
	prev := Remember(before.Conditions, before.ObservedGeneration)
	st := status
	if st == nil {
		st = new(readyStatus)
		require.NoError(t, json.Unmarshal(b, st))
	}
	err = Conclude("Widget", generation, prev, &st.Conditions, st.ObservedGeneration, out, time.Now())
	st.ObservedGeneration = generation
	return st, err
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

func TestStatusConventionsByOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  Outcome
		want []string
	}{
		{"success", Outcome{}, []string{"Ready=True/Reconciled@2"}},
		{"a negative After is none", Outcome{After: -time.Second}, []string{"Ready=True/Reconciled@2"}},
		// A reconcile done until a time it chose, such as a CronJob's
		// next run, is Ready: one that always has a next run would never
		// be, and kubectl wait would never return (issue 37).
		{"a positive After is done until then", Outcome{After: time.Minute}, []string{"Ready=True/Reconciled@2"}},
		{"Waiting", Outcome{Waiting: "boom: 1/3 replicas available", After: time.Minute}, []string{"Ready=False/Waiting@2", "Reconciling=True/Waiting@2"}},
		{"an error retried", Outcome{Err: errors.New("boom")}, []string{"Ready=False/ReconcileFailed@2", "Reconciling=True/ReconcileFailed@2"}},
		{"an error retried, with Waiting", Outcome{Err: errors.New("boom"), Waiting: "boom"}, []string{"Ready=False/ReconcileFailed@2", "Reconciling=True/ReconcileFailed@2"}},
		{"a terminal error", Outcome{Err: Terminal(errors.New("boom"))}, []string{"Ready=False/TerminalError@2", "Stalled=True/TerminalError@2"}},
		{"a wrapped terminal error", Outcome{After: time.Minute, Err: fmt.Errorf("wrapped: %w", Terminal(errors.New("boom")))}, []string{"Ready=False/TerminalError@2", "Stalled=True/TerminalError@2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, err := concludeOn(t, 2, readyStatus{ObservedGeneration: 1}, &readyStatus{Seen: 3}, tc.out)
				require.Equal(t, tc.out.Err, err, "the error is the Reconciler's")
				require.Equal(t, int64(2), st.ObservedGeneration)
				require.Equal(t, int64(3), st.Seen, "the Reconciler's fields are kept")
				require.Equal(t, tc.want, summary(st.Conditions))
				for _, c := range st.Conditions {
					require.Equal(t, time.Now().UTC(), c.LastTransitionTime.UTC())
					if tc.out.Err != nil || tc.out.Waiting != "" {
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
		start := time.Now()
		st, err := concludeOn(t, 1, readyStatus{}, nil, Outcome{Err: errors.New("boom")})
		require.Error(t, err)
		require.Equal(t, []string{"Ready=False/ReconcileFailed@1", "Reconciling=True/ReconcileFailed@1"}, summary(st.Conditions))

		time.Sleep(time.Minute)
		st, err = concludeOn(t, 1, *st, nil, Outcome{Err: Terminal(errors.New("bad spec"))})
		require.Error(t, err)
		require.Equal(t, []string{"Ready=False/TerminalError@1", "Stalled=True/TerminalError@1"}, summary(st.Conditions))
		ready := meta.FindStatusCondition(st.Conditions, Ready)
		require.Equal(t, start.UTC(), ready.LastTransitionTime.UTC(), "Ready stayed False")
		require.Equal(t, "bad spec", ready.Message)

		time.Sleep(time.Minute)
		st, err = concludeOn(t, 2, *st, &readyStatus{Seen: 4}, Outcome{})
		require.NoError(t, err)
		require.Equal(t, []string{"Ready=True/Reconciled@2"}, summary(st.Conditions), "a status made afresh still has kube's conditions")
		ready = meta.FindStatusCondition(st.Conditions, Ready)
		require.Equal(t, time.Now().UTC(), ready.LastTransitionTime.UTC())
		require.Empty(t, ready.Message)

		// Steady state: the same status, byte for byte, so nothing to apply.
		time.Sleep(time.Minute)
		before, _ := json.Marshal(st)
		again, err := concludeOn(t, 2, *st, &readyStatus{Seen: 4}, Outcome{})
		require.NoError(t, err)
		after, _ := json.Marshal(again)
		require.JSONEq(t, string(before), string(after))
		require.Equal(t, string(before), string(after))
	})
}

// The Reconciler's own conditions are its; kube's it may not set.
func TestStatusConventionsRefuseTheReconcilersOwnReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prev, err := concludeOn(t, 1, readyStatus{}, &readyStatus{}, Outcome{})
		require.NoError(t, err)

		mine := *prev
		mine.Conditions = append([]metav1.Condition(nil), prev.Conditions...)
		meta.SetStatusCondition(&mine.Conditions, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up"})
		st, err := concludeOn(t, 1, *prev, &mine, Outcome{})
		require.NoError(t, err, "another condition type is the Reconciler's")
		require.Equal(t, []string{"Ready=True/Reconciled@1", "Available=True/Up@0"}, summary(st.Conditions))

		mine.ObservedGeneration = 2
		st, err = concludeOn(t, 2, *prev, &mine, Outcome{})
		require.NoError(t, err, "the generation kube writes too is no conflict")
		require.Equal(t, int64(2), st.ObservedGeneration)

		for _, typ := range []string{Ready, Reconciling, Stalled} {
			own := readyStatus{Conditions: append([]metav1.Condition(nil), prev.Conditions...)}
			meta.SetStatusCondition(&own.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: "Mine"})
			st, err := concludeOn(t, 1, *prev, &own, Outcome{})
			require.True(t, IsTerminal(err), "%s: %v", typ, err)
			require.ErrorContains(t, err, "set the status's condition "+typ+", which kube writes")
			require.Equal(t, []string{"Ready=False/TerminalError@1", "Stalled=True/TerminalError@1"}, summary(st.Conditions), typ)
		}
		st, err = concludeOn(t, 1, *prev, &readyStatus{ObservedGeneration: 7}, Outcome{})
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
	long := strings.Repeat("é", MaxMessage) // two bytes each
	got := conditionMessage(errors.New(long))
	require.LessOrEqual(t, len(got), MaxMessage)
	require.True(t, strings.HasSuffix(got, "…"))
	require.True(t, json.Valid([]byte(fmt.Sprintf("%q", got))))
	require.Equal(t, "short", conditionMessage(errors.New("short")))
}
