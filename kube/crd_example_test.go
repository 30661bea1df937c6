package kube_test

import (
	"fmt"
	"regexp"

	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus/kube"
)

// A Resource's CRD is reflected from its Spec and Status types, and its
// Rules constrain their fields with typed values.
func ExampleResource_CRD() {
	type BackupSpec struct {
		Schedule string   `json:"schedule"`
		Keep     int32    `json:"keep,omitempty"`
		Targets  []string `json:"targets"`
	}
	type BackupStatus struct {
		LastRun string `json:"lastRun,omitempty"`
	}
	var spec BackupSpec
	backup := kube.Resource[BackupSpec, BackupStatus]{
		Group:   "ops.example.com",
		Version: "v1",
		Kind:    "Backup",
		Plural:  "backups",
		Scope:   kube.Namespaced,
		Rules: []kube.TypeRules{
			kube.Rules(&spec,
				kube.Field(&spec.Schedule).Pattern(regexp.MustCompile(`^@(daily|weekly)$`)),
				kube.Field(&spec.Keep).Minimum(1).Default(7),
				kube.Field(&spec.Targets).MinItems(1).ListSet(),
			).Validation("self.keep <= 30 || self.schedule == '@weekly'", "keep at most 30 daily backups"),
		},
	}
	crd, err := backup.CRD()
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := yaml.Marshal(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"])
	fmt.Printf("%s: %s", crd.Name, out)
	// Output:
	// backups.ops.example.com: properties:
	//   keep:
	//     default: 7
	//     format: int32
	//     minimum: 1
	//     type: integer
	//   schedule:
	//     pattern: ^@(daily|weekly)$
	//     type: string
	//   targets:
	//     items:
	//       type: string
	//     minItems: 1
	//     type: array
	//     x-kubernetes-list-type: set
	// required:
	// - schedule
	// - targets
	// type: object
	// x-kubernetes-validations:
	// - message: keep at most 30 daily backups
	//   rule: self.keep <= 30 || self.schedule == '@weekly'
}

// CRD names every mistake it finds, in one error.
func ExampleResource_CRD_errors() {
	type Spec struct {
		Port    int32              `json:"port"`
		Options map[float64]string `json:"options"`
	}
	var spec Spec
	r := kube.Resource[Spec, struct{}]{
		Group:   "ops.example.com",
		Version: "v1",
		Kind:    "Proxy",
		Scope:   kube.Namespaced,
		Rules: []kube.TypeRules{
			kube.Rules(&spec, kube.Field(&spec.Port).MaxLength(5)),
		},
	}
	_, err := r.CRD()
	fmt.Println(err)
	// Output:
	// kube: Resource.Plural is missing: give one, such as memcacheds
	// kube: spec.port: Rules for kube_test.Spec: Spec.Port: MaxLength fits a field of type string, not integer
	// kube: spec.options: map[float64]string has keys of type float64, which encoding/json can't encode: a map's keys must be strings, integers, or implement encoding.TextMarshaler
}
