//go:build controlplane

package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestTheAPIServerRefusesTheFieldPathsCRDRefuses creates, with dryRun,
// the CRD of a root rule with each of rootFieldPaths on the local control
// plane: the API server refuses exactly the paths CRD refuses, naming the
// rule's fieldPath ("must be a valid path"), and accepts the others
// (issue 37: .metadata.name passed CRD and the server refused the CRD).
func TestTheAPIServerRefusesTheFieldPathsCRDRefuses(t *testing.T) {
	cluster := controlplanetest.Start(t)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	valid, err := pathResource(".spec").CRD()
	require.NoError(t, err)
	for _, path := range rootFieldPaths {
		crd := valid.DeepCopy()
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.XValidations[0].FieldPath = path
		_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
		_, crdErr := pathResource(path).CRD()
		if crdErr == nil {
			require.NoError(t, err, "the API server refuses %q, which CRD accepts", path)
			continue
		}
		require.Error(t, err, "the API server accepts %q, which CRD refuses: %v", path, crdErr)
		require.True(t, apierrors.IsInvalid(err), "%q: %v", path, err)
		require.Contains(t, err.Error(), "x-kubernetes-validations[0].fieldPath", "%q", path)
	}
}
