package controllertools_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)

// TestCronJobCRDPassesTheAPIServersValidation checks the ported CRD with
// the API server's own code, as it checks a CRD that is created: the v1
// defaults, the conversion to the internal version, and
// ValidateCustomResourceDefinition (structural schema, defaults, list
// types, CEL compilation).
func TestCronJobCRDPassesTheAPIServersValidation(t *testing.T) {
	crd, err := CronJob.CRD()
	require.NoError(t, err)
	v1 := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
	var internal apiextensions.CustomResourceDefinition
	require.NoError(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, &internal, nil))
	internal.Status.StoredVersions = []string{"v1"}
	require.Empty(t, validation.ValidateCustomResourceDefinition(context.Background(), &internal))
}
