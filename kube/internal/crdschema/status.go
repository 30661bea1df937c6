package crdschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The reflection side of kube's Resource.StatusConventions: where a Status
// type holds the fields kube writes, and the status default of the CRD.
// What kube writes in them is internal/conditions'.

// StatusFields returns the index of the fields of status type t that
// StatusConventions writes, or an error naming what t lacks:
// conditions, a []metav1.Condition, and observedGeneration, an int64, each
// as encoding/json names it and not promoted through an embedded pointer.
func StatusFields(t reflect.Type) (conditions, generation []int, err error) {
	var errs []error
	idx, typ, viaPointer, ok := JSONField(t, "conditions")
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
	idx, typ, viaPointer, ok = JSONField(t, "observedGeneration")
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

// DefaultStatus gives the status of the CRD's version named version, the
// Resource's own (whose Go type is status; another version's status is
// its conversion's), the default its zero value encodes to, with
// observedGeneration 0, so that the API server serves every object whose
// controller hasn't written its status yet with status.observedGeneration
// 0, behind its metadata.generation, 1 or more: kstatus reads it as
// InProgress, kubectl wait --for=condition=Ready waits and the Argo CD
// health check says Progressing, from the object's creation, before the
// controller has even seen it. The API server applies a default on every
// read of an object that lacks the field, and a create drops the status
// the request carries.
func DefaultStatus(crd *apiextensionsv1.CustomResourceDefinition, version string, status reflect.Type) error {
	zero := reflect.Zero(status).Interface()
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
