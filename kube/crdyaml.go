package kube

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// CRDYAML is the resource's CRD as YAML, as a user checks it into their
// repository and applies it: CRD's object, as sigs.k8s.io/yaml writes it
// (keys sorted), without its status, which is the API server's to write
// and which kubectl apply ignores. It returns CRD's error.
func (r Resource[Spec, Status]) CRDYAML() ([]byte, error) {
	crd, err := r.CRD()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(crd)
	if err != nil {
		return nil, fmt.Errorf("kube: the CRD of %s: %w", r.Plural, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("kube: the CRD of %s: %w", r.Plural, err)
	}
	delete(fields, "status")
	if b, err = json.Marshal(fields); err != nil {
		return nil, fmt.Errorf("kube: the CRD of %s: %w", r.Plural, err)
	}
	return yaml.JSONToYAML(b)
}
