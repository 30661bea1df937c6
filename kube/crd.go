package kube

import (
	"errors"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// CRD returns the resource's CustomResourceDefinition. (Being written.)
func (r Resource[Spec, Status]) CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	return nil, errors.New("kube: CRD is not written yet")
}
