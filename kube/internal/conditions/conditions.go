// Package conditions computes the status conditions kube writes for a
// Resource with StatusConventions, from how a reconcile ended: Ready,
// Reconciling and Stalled, as kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status)
// names them, and the check that the Reconciler left them, and the
// status's observedGeneration, to kube. Package kube's
// Resource.StatusConventions, Terminal, IsTerminal and the Condition and
// Reason constants are its public face and document what an object's
// status shows; this package owns how the conditions are made. Finding the
// conditions and observedGeneration fields in a Status type, and the CRD's
// status default, are internal/crdschema's (StatusFields, DefaultStatus).
//
// Its surface is Remember, which keeps what Conclude needs of a status
// before the Reconciler runs; Conclude, which sets the conditions from an
// Outcome; Terminal and IsTerminal, the mark of a failure retrying won't
// mend; and the condition types and reasons.
//
// Its invariants:
//
//   - Conclude is a function of its arguments alone: the outcome, the
//     object's generation, the conditions before the reconcile and after
//     it, and the clock (now); it reads no other state and keeps none.
//   - Ready is always set; Reconciling and Stalled are "abnormal-true":
//     set True, or removed, never False. A condition's lastTransitionTime
//     moves only when its status does (meta.SetStatusCondition).
//   - A condition's message is at most MaxMessage bytes, cut at a rune's
//     start.
//   - A Reconciler that sets one of kube's conditions, or an
//     observedGeneration other than the object's, has its value replaced
//     by kube's and its reconcile failed with a Terminal error.
package conditions

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition types, kube's ConditionReady, ConditionReconciling and
// ConditionStalled.
const (
	Ready       = "Ready"
	Reconciling = "Reconciling"
	Stalled     = "Stalled"
)

// The reasons, kube's Reason constants of the same names.
const (
	ReasonReconciled      = "Reconciled"
	ReasonRequeued        = "Requeued" // no longer written; kube.ReasonRequeued
	ReasonWaiting         = "Waiting"
	ReasonTerminalError   = "TerminalError"
	ReasonReconcileFailed = "ReconcileFailed"
)

// MaxMessage is the most bytes of a condition's message: the maxLength of
// metav1.Condition's message in the CRD's schema, 32768 characters, of
// which a byte is at most one.
const MaxMessage = 32768

// Terminal marks err as a failure retrying won't mend (kube.Terminal).
// Terminal(nil) is nil; the error returned has err's message and unwraps
// to err.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// IsTerminal reports whether err, or an error it wraps, was marked with
// Terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

// terminalError is an error marked with Terminal.
type terminalError struct{ err error }

func (t *terminalError) Error() string { return t.err.Error() }
func (t *terminalError) Unwrap() error { return t.err }

// types are the condition types kube writes, in the order it adds them to
// an object that has none.
func types() [3]string { return [...]string{Ready, Reconciling, Stalled} }

// Previous is what Conclude needs of an object's status before the
// Reconciler runs: copies of kube's conditions (nil where absent) and the
// observedGeneration, since the Reconciler may change the status's slices
// in place.
type Previous struct {
	conditions [3]*metav1.Condition
	generation int64
}

// Remember returns the Previous of a status whose conditions and
// observedGeneration these are, before the Reconciler runs.
func Remember(conditions []metav1.Condition, observedGeneration int64) Previous {
	var p Previous
	for i, typ := range types() {
		if c := meta.FindStatusCondition(conditions, typ); c != nil {
			cp := *c
			p.conditions[i] = &cp
		}
	}
	p.generation = observedGeneration
	return p
}

// Outcome is how a reconcile ended, as the status conventions read it:
// its Result's After and Waiting, and its error. After changes none of
// the conditions: a reconcile that succeeded with nothing Waiting is
// Ready whenever it asked to be reconciled again.
type Outcome struct {
	After   time.Duration
	Waiting string
	Err     error
}

// Conclude sets kube's conditions in *conditions, the status's after a
// reconcile of an object of kind kind and generation generation, whose
// status before it ran was prev, and that ended as out; observed is the
// status's observedGeneration as the Reconciler left it, which the caller
// then sets to generation. It returns out's error, joined with a Terminal
// error if the Reconciler set one of kube's conditions or the
// observedGeneration itself. now is the lastTransitionTime of a condition
// whose status changes.
func Conclude(kind string, generation int64, prev Previous, conditions *[]metav1.Condition, observed int64, out Outcome, now time.Time) error {
	err := out.Err
	set := restore(prev, conditions)
	if observed != 0 && observed != prev.generation && observed != generation {
		set = append(set, "observedGeneration")
	}
	if len(set) > 0 {
		err = errors.Join(err, Terminal(fmt.Errorf("kube: the Reconciler of %s set the status's %s, which kube writes for a Resource with StatusConventions: leave them to kube, and return an error marked with kube.Terminal for a failure retrying won't mend", kind, strings.Join(set, " and "))))
	}

	at := metav1.NewTime(now)
	ready := metav1.Condition{Type: Ready, ObservedGeneration: generation, LastTransitionTime: at}
	var reconciling, stalled *metav1.Condition
	switch {
	case IsTerminal(err):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonTerminalError, conditionMessage(err)
		stalled = &metav1.Condition{Type: Stalled, Status: metav1.ConditionTrue, Reason: ReasonTerminalError, Message: ready.Message, ObservedGeneration: generation, LastTransitionTime: at}
	case err != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonReconcileFailed, conditionMessage(err)
		reconciling = &metav1.Condition{Type: Reconciling, Status: metav1.ConditionTrue, Reason: ReasonReconcileFailed, Message: "retrying after the error: " + ready.Message, ObservedGeneration: generation, LastTransitionTime: at}
		reconciling.Message = truncateMessage(reconciling.Message)
	case out.Waiting != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonWaiting, truncateMessage(out.Waiting)
		reconciling = &metav1.Condition{Type: Reconciling, Status: metav1.ConditionTrue, Reason: ReasonWaiting, Message: ready.Message, ObservedGeneration: generation, LastTransitionTime: at}
	default:
		// A positive After with nothing Waiting is a reconcile that is
		// done until a time it chose, such as a CronJob's next run: Ready,
		// as one without After. A controller that always has a next run
		// would otherwise never be Ready.
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonReconciled
	}
	meta.SetStatusCondition(conditions, ready)
	for i, c := range [...]*metav1.Condition{reconciling, stalled} {
		if c == nil {
			meta.RemoveStatusCondition(conditions, types()[i+1])
		} else {
			meta.SetStatusCondition(conditions, *c)
		}
	}
	return err
}

// restore puts back in *conditions kube's conditions as prev had them,
// and returns those the Reconciler set itself ("condition Ready", …): one
// absent is a status the Reconciler made afresh, and kube's condition is
// kept as it was, so its lastTransitionTime holds while its status does;
// one that differs from prev's, or that prev lacks, the Reconciler set.
func restore(prev Previous, conditions *[]metav1.Condition) []string {
	var set []string
	for i, typ := range types() {
		c := meta.FindStatusCondition(*conditions, typ)
		if c == nil {
			if prev.conditions[i] != nil {
				*conditions = append(*conditions, *prev.conditions[i])
			}
			continue
		}
		if prev.conditions[i] == nil || !sameCondition(*c, *prev.conditions[i]) {
			set = append(set, "condition "+typ)
			if prev.conditions[i] != nil {
				*c = *prev.conditions[i]
			} else {
				meta.RemoveStatusCondition(conditions, typ)
			}
		}
	}
	return set
}

// sameCondition reports whether a and b are alike in every field.
func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// conditionMessage is err's message as a condition's message.
func conditionMessage(err error) string {
	return truncateMessage(err.Error())
}

// truncateMessage cuts s to MaxMessage bytes, at a rune's start.
func truncateMessage(s string) string {
	if len(s) <= MaxMessage {
		return s
	}
	const ellipsis = "…"
	cut := MaxMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
