package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// The condition types kube writes for a Resource with StatusConventions,
// as kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status, which Flux uses)
// names them: Ready is True once the object is reconciled, Reconciling is
// True while the controller has work left on it, and Stalled is True when
// the Reconciler declared a failure retrying won't mend (Terminal).
// Reconciling and Stalled are "abnormal-true": kube removes them rather
// than set them False.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// The reasons of the conditions kube writes for a Resource with
// StatusConventions. ReasonReconcileFailed, an error being retried, is
// also the reason of the Warning Event of a failed reconcile.
const (
	// ReasonReconciled: Ready True, the last reconcile of the object's
	// generation succeeded and asked for no other.
	ReasonReconciled = "Reconciled"
	// ReasonRequeued: Ready False and Reconciling True, the reconcile
	// succeeded and returned a positive Result.After.
	ReasonRequeued = "Requeued"
	// ReasonWaiting: Ready False and Reconciling True, the reconcile
	// succeeded and returned a Result.Waiting.
	ReasonWaiting = "Waiting"
	// ReasonTerminalError: Ready False and Stalled True, the reconcile
	// returned an error marked with Terminal.
	ReasonTerminalError = "TerminalError"
)

// maxConditionMessage is the most bytes of a condition's message: the
// maxLength of metav1.Condition's message in the CRD's schema, 32768
// characters, of which a byte is at most one.
const maxConditionMessage = 32768

// Terminal marks err as a failure retrying won't mend, such as a spec the
// cluster refuses, as controller-runtime's reconcile.TerminalError does:
// the controller doesn't retry the object, and reconciles it again only
// when it changes, at the resync or when the controller restarts. The
// failure is still logged, counted with the outcome error and recorded as
// a Warning Event. For a Resource with StatusConventions, it is Stalled
// True and Ready False, with err's message. Terminal(nil) is nil; the
// error returned has err's message and unwraps to err, so errors.Is and
// errors.As see through it.
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

// kubeConditions are the condition types kube writes, in the order it
// adds them to an object that has none.
var kubeConditions = [...]string{ConditionReady, ConditionReconciling, ConditionStalled}

// statusConventions writes, for a Resource with StatusConventions, the
// status fields kstatus, kubectl wait and Argo CD read, beside the
// Reconciler's: conditions and observedGeneration are where the Status
// type holds them (statusFields).
type statusConventions[Spec, Status any] struct {
	kind       string
	conditions []int // index of Status's []metav1.Condition, json conditions
	generation []int // index of Status's int64, json observedGeneration
}

// conventionsMemo is what the conventions keep of an object's status
// before the Reconciler runs: copies of kube's conditions (nil where
// absent) and the observedGeneration, since the Reconciler may change the
// status's slices in place.
type conventionsMemo struct {
	conditions [len(kubeConditions)]*metav1.Condition
	generation int64
}

// statusFields returns the index of the fields of status type t that
// StatusConventions writes, or an error naming what t lacks.
func statusFields(t reflect.Type) (conditions, generation []int, err error) {
	var errs []error
	idx, typ, viaPointer, ok := crdschema.JSONField(t, "conditions")
	switch {
	case !ok:
		errs = append(errs, fmt.Errorf("has no field encoded as conditions"))
	case typ != reflect.TypeFor[[]metav1.Condition]():
		errs = append(errs, fmt.Errorf("field conditions is %v, not []metav1.Condition", typ))
	case viaPointer:
		errs = append(errs, fmt.Errorf("field conditions is promoted through an embedded pointer"))
	default:
		conditions = idx
	}
	idx, typ, viaPointer, ok = crdschema.JSONField(t, "observedGeneration")
	switch {
	case !ok:
		errs = append(errs, fmt.Errorf("has no field encoded as observedGeneration"))
	case typ.Kind() != reflect.Int64:
		errs = append(errs, fmt.Errorf("field observedGeneration is %v, not int64", typ))
	case viaPointer:
		errs = append(errs, fmt.Errorf("field observedGeneration is promoted through an embedded pointer"))
	default:
		generation = idx
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("kube: StatusConventions: the Status type %v %w", t, e)
		}
		return nil, nil, errors.Join(errs...)
	}
	return conditions, generation, nil
}

// newStatusConventions returns r's conventions, or nil without
// StatusConventions, or an error naming what r's Status lacks.
func newStatusConventions[Spec, Status any](r Resource[Spec, Status]) (*statusConventions[Spec, Status], error) {
	if !r.StatusConventions {
		return nil, nil
	}
	conditions, generation, err := statusFields(reflect.TypeFor[Status]())
	if err != nil {
		return nil, err
	}
	return &statusConventions[Spec, Status]{kind: r.Kind, conditions: conditions, generation: generation}, nil
}

// defaultStatus gives the status of the CRD's version, the Resource's own
// (whose Go type is Status; another version's status is its conversion's),
// the default its zero Status encodes to, with observedGeneration 0, so
// that the API server serves every
// object whose controller hasn't written its status yet with
// status.observedGeneration 0, behind its metadata.generation, 1 or more:
// kstatus reads it as InProgress, kubectl wait --for=condition=Ready waits
// and the Argo CD health check says Progressing, from the object's
// creation, before the controller has even seen it. The API server
// applies a default on every read of an object that lacks the field,
// and a create drops the status the request carries.
func defaultStatus[Status any](crd *apiextensionsv1.CustomResourceDefinition, version string) error {
	var zero Status
	b, err := json.Marshal(zero)
	if err != nil {
		return fmt.Errorf("kube: StatusConventions: encoding the zero %T: %w", zero, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("kube: StatusConventions: decoding the zero %T: %w", zero, err)
	}
	for k, v := range m {
		if v == nil {
			delete(m, k)
		}
	}
	m["observedGeneration"] = 0
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("kube: StatusConventions: encoding the status default: %w", err)
	}
	for i := range crd.Spec.Versions {
		s := crd.Spec.Versions[i].Schema
		if crd.Spec.Versions[i].Name != version || s == nil || s.OpenAPIV3Schema == nil {
			continue
		}
		st, ok := s.OpenAPIV3Schema.Properties["status"]
		if !ok {
			continue
		}
		st.Default = &apiextensionsv1.JSON{Raw: raw}
		s.OpenAPIV3Schema.Properties["status"] = st
	}
	return nil
}

// conditionsOf returns a pointer to st's conditions.
func (sc *statusConventions[Spec, Status]) conditionsOf(st *Status) *[]metav1.Condition {
	return reflect.ValueOf(st).Elem().FieldByIndex(sc.conditions).Addr().Interface().(*[]metav1.Condition)
}

// generationOf returns st's observedGeneration field.
func (sc *statusConventions[Spec, Status]) generationOf(st *Status) reflect.Value {
	return reflect.ValueOf(st).Elem().FieldByIndex(sc.generation)
}

// remember returns what conclude needs of st, the object's status before
// the Reconciler runs.
func (sc *statusConventions[Spec, Status]) remember(st *Status) conventionsMemo {
	var m conventionsMemo
	conditions := *sc.conditionsOf(st)
	for i, typ := range kubeConditions {
		if c := meta.FindStatusCondition(conditions, typ); c != nil {
			cp := *c
			m.conditions[i] = &cp
		}
	}
	m.generation = sc.generationOf(st).Int()
	return m
}

// reconcile calls rec on obj, whose status encodes to before, and returns
// what it returned with the status conclude makes of it.
func (sc *statusConventions[Spec, Status]) reconcile(ctx context.Context, rec Reconciler[Spec, Status], obj Object[Spec, Status], before []byte) (time.Duration, any, error) {
	memo := sc.remember(&obj.Status)
	res, err := rec.Reconcile(ctx, obj)
	st, err := sc.conclude(obj.Generation, before, memo, res.Status, outcome{after: res.After, waiting: res.Waiting, err: err})
	if st == nil {
		return res.After, nil, err
	}
	return res.After, st, err
}

// outcome is how a reconcile ended, as the status conventions read it:
// its Result's After and Waiting, and its error.
type outcome struct {
	after   time.Duration
	waiting string
	err     error
}

// conclude returns the status to apply after a reconcile of an object of
// generation generation, whose status before it ran was before (its JSON)
// and memo, and that returned status (nil to keep the object's) and out:
// the Reconciler's status with kube's fields set by the outcome (see
// Resource.StatusConventions), and out's error, joined with a Terminal
// error if the Reconciler set one of kube's fields itself.
func (sc *statusConventions[Spec, Status]) conclude(generation int64, before []byte, memo conventionsMemo, status *Status, out outcome) (*Status, error) {
	err := out.err
	st := status
	if st == nil {
		// The object's status as it was: the Reconciler may have changed
		// its slices in place.
		st = new(Status)
		if len(before) > 0 {
			if decodeErr := json.Unmarshal(before, st); decodeErr != nil {
				return nil, errors.Join(err, fmt.Errorf("kube: decoding the status of a %s: %w", sc.kind, decodeErr))
			}
		}
	}
	conditions := sc.conditionsOf(st)
	var set []string
	for i, typ := range kubeConditions {
		c := meta.FindStatusCondition(*conditions, typ)
		if c == nil {
			if memo.conditions[i] != nil {
				// A status the Reconciler made afresh: kube's condition
				// is kept as it was, so its lastTransitionTime holds
				// while its status does.
				*conditions = append(*conditions, *memo.conditions[i])
			}
			continue
		}
		if memo.conditions[i] == nil || !sameCondition(*c, *memo.conditions[i]) {
			set = append(set, "condition "+typ)
			if memo.conditions[i] != nil {
				*c = *memo.conditions[i]
			} else {
				meta.RemoveStatusCondition(conditions, typ)
			}
		}
	}
	if g := sc.generationOf(st).Int(); g != 0 && g != memo.generation && g != generation {
		set = append(set, "observedGeneration")
	}
	if len(set) > 0 {
		err = errors.Join(err, Terminal(fmt.Errorf("kube: the Reconciler of %s set the status's %s, which kube writes for a Resource with StatusConventions: leave them to kube, and return an error marked with kube.Terminal for a failure retrying won't mend", sc.kind, strings.Join(set, " and "))))
	}

	sc.generationOf(st).SetInt(generation)
	ready := metav1.Condition{Type: ConditionReady, ObservedGeneration: generation}
	var reconciling, stalled *metav1.Condition
	switch {
	case IsTerminal(err):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonTerminalError, conditionMessage(err)
		stalled = &metav1.Condition{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: ReasonTerminalError, Message: ready.Message, ObservedGeneration: generation}
	case err != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonReconcileFailed, conditionMessage(err)
		reconciling = &metav1.Condition{Type: ConditionReconciling, Status: metav1.ConditionTrue, Reason: ReasonReconcileFailed, Message: "retrying after the error: " + ready.Message, ObservedGeneration: generation}
		reconciling.Message = truncateMessage(reconciling.Message)
	case out.waiting != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonWaiting, truncateMessage(out.waiting)
		reconciling = &metav1.Condition{Type: ConditionReconciling, Status: metav1.ConditionTrue, Reason: ReasonWaiting, Message: ready.Message, ObservedGeneration: generation}
	case out.after > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonRequeued, "the Reconciler asked to reconcile again after a while (Result.After)"
		reconciling = &metav1.Condition{Type: ConditionReconciling, Status: metav1.ConditionTrue, Reason: ReasonRequeued, Message: ready.Message, ObservedGeneration: generation}
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonReconciled
	}
	meta.SetStatusCondition(conditions, ready)
	for i, c := range [...]*metav1.Condition{reconciling, stalled} {
		if c == nil {
			meta.RemoveStatusCondition(conditions, kubeConditions[i+1])
		} else {
			meta.SetStatusCondition(conditions, *c)
		}
	}
	return st, err
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

// truncateMessage cuts s to maxConditionMessage bytes, at a rune's start.
func truncateMessage(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	const ellipsis = "…"
	cut := maxConditionMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
