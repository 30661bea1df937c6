package storagemigration

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// crdGVR is the resource of CustomResourceDefinitions.
var crdGVR = schema.GroupVersionResource{Group: apiextensionsv1.GroupName, Version: "v1", Resource: "customresourcedefinitions"}

// getCRD reads the controller's CRD through its status subresource, which
// answers with the whole object (so a get on customresourcedefinitions/status
// is the only read it needs), as it is and decoded.
func (m *Migration) getCRD(ctx context.Context) (*unstructured.Unstructured, *apiextensionsv1.CustomResourceDefinition, error) {
	u, err := m.cfg.Dynamic.Resource(crdGVR).Get(ctx, m.crdName(), metav1.GetOptions{}, "status")
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
		return nil, nil, fmt.Errorf("decoding the CRD: %w", err)
	}
	return u, &crd, nil
}

// storageVersionOf is the name of crd's storage version, or "".
func storageVersionOf(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// setCondition updates crd's status, as read, with the migration's
// condition, and storedVersions when not nil, keeping every other field as
// the API server sent it. The update carries crd's resourceVersion, so a
// CRD changed since is a conflict.
func (m *Migration) setCondition(ctx context.Context, crd *unstructured.Unstructured, status metav1.ConditionStatus, reason, message string, storedVersions []string) error {
	crd = crd.DeepCopy()
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	cond := map[string]any{
		"type":               condition,
		"status":             string(status),
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
		"reason":             reason,
		"message":            message,
		"observedGeneration": crd.GetGeneration(),
	}
	i := slices.IndexFunc(conds, func(c any) bool {
		cm, ok := c.(map[string]any)
		return ok && cm["type"] == condition
	})
	if i < 0 {
		conds = append(conds, cond)
	} else {
		if old, ok := conds[i].(map[string]any); ok && old["status"] == string(status) {
			cond["lastTransitionTime"] = old["lastTransitionTime"]
		}
		conds[i] = cond
	}
	if err := unstructured.SetNestedSlice(crd.Object, conds, "status", "conditions"); err != nil {
		return err
	}
	if storedVersions != nil {
		if err := unstructured.SetNestedStringSlice(crd.Object, storedVersions, "status", "storedVersions"); err != nil {
			return err
		}
	}
	if _, err := m.cfg.Dynamic.Resource(crdGVR).UpdateStatus(ctx, crd, metav1.UpdateOptions{FieldManager: m.cfg.Name}); err != nil {
		return fmt.Errorf("updating the CRD's status: %w", err)
	}
	return nil
}
