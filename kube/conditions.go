package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/internal/conditions"
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
	// generation succeeded with no Result.Waiting, whether or not it
	// asked to be reconciled again after a Result.After.
	ReasonReconciled = "Reconciled"
	// ReasonRequeued is no longer written. It was Ready False and
	// Reconciling True after a reconcile that succeeded with a positive
	// Result.After, which kept an object that always has a next run,
	// such as a CronJob, from ever being Ready; such a reconcile is now
	// ReasonReconciled. Kept for code that compares with it.
	ReasonRequeued = "Requeued"
	// ReasonWaiting: Ready False and Reconciling True, the reconcile
	// succeeded and returned a Result.Waiting.
	ReasonWaiting = "Waiting"
	// ReasonTerminalError: Ready False and Stalled True, the reconcile
	// returned an error marked with Terminal.
	ReasonTerminalError = "TerminalError"
)

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
	return conditions.Terminal(err)
}

// IsTerminal reports whether err, or an error it wraps, was marked with
// Terminal.
func IsTerminal(err error) bool {
	return conditions.IsTerminal(err)
}

// statusConventions writes, for a Resource with StatusConventions, the
// status fields kstatus, kubectl wait and Argo CD read, beside the
// Reconciler's: conditions and observedGeneration are where the Status
// type holds them (crdschema.StatusFields), and what kube writes in them
// is conditions.Conclude's.
type statusConventions[Spec, Status any] struct {
	kind       string
	conditions []int // index of Status's []metav1.Condition, json conditions
	generation []int // index of Status's int64, json observedGeneration
}

// newStatusConventions returns r's conventions, or nil without
// StatusConventions, or an error naming what r's Status lacks.
func newStatusConventions[Spec, Status any](r Resource[Spec, Status]) (*statusConventions[Spec, Status], error) {
	if !r.StatusConventions {
		return nil, nil
	}
	conds, gen, err := crdschema.StatusFields(reflect.TypeFor[Status]())
	if err != nil {
		return nil, err
	}
	return &statusConventions[Spec, Status]{kind: r.Kind, conditions: conds, generation: gen}, nil
}

// conditionsOf returns a pointer to st's conditions.
func (sc *statusConventions[Spec, Status]) conditionsOf(st *Status) *[]metav1.Condition {
	return reflect.ValueOf(st).Elem().FieldByIndex(sc.conditions).Addr().Interface().(*[]metav1.Condition)
}

// generationOf returns st's observedGeneration field.
func (sc *statusConventions[Spec, Status]) generationOf(st *Status) reflect.Value {
	return reflect.ValueOf(st).Elem().FieldByIndex(sc.generation)
}

// reconcile calls rec on obj, whose status encodes to before, and returns
// what it returned with the status conclude makes of it.
func (sc *statusConventions[Spec, Status]) reconcile(ctx context.Context, rec Reconciler[Spec, Status], obj Object[Spec, Status], before []byte) (time.Duration, any, error) {
	prev := conditions.Remember(*sc.conditionsOf(&obj.Status), sc.generationOf(&obj.Status).Int())
	res, err := rec.Reconcile(ctx, obj)
	st, err := sc.conclude(obj.Generation, before, prev, res.Status, conditions.Outcome{After: res.After, Waiting: res.Waiting, Err: err})
	if st == nil {
		return res.After, nil, err
	}
	return res.After, st, err
}

// conclude returns the status to apply after a reconcile of an object of
// generation generation, whose status before it ran was before (its JSON)
// and prev, and that returned status (nil to keep the object's) and out:
// the Reconciler's status with kube's fields set by the outcome (see
// Resource.StatusConventions and conditions.Conclude), and out's error,
// joined with a Terminal error if the Reconciler set one of kube's fields
// itself.
func (sc *statusConventions[Spec, Status]) conclude(generation int64, before []byte, prev conditions.Previous, status *Status, out conditions.Outcome) (*Status, error) {
	st := status
	if st == nil {
		// The object's status as it was: the Reconciler may have changed
		// its slices in place.
		st = new(Status)
		if len(before) > 0 {
			if decodeErr := json.Unmarshal(before, st); decodeErr != nil {
				return nil, errors.Join(out.Err, fmt.Errorf("kube: decoding the status of a %s: %w", sc.kind, decodeErr))
			}
		}
	}
	err := conditions.Conclude(sc.kind, generation, prev, sc.conditionsOf(st), sc.generationOf(st).Int(), out, time.Now())
	sc.generationOf(st).SetInt(generation)
	return st, err
}
