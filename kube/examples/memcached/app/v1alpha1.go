package app

import (
	"regexp"

	"github.com/z5labs/humus/kube"
)

// MemcachedSpecV1alpha1 is what a Memcached declares at v1alpha1, the
// first version: MemcachedSpec without Resources.
type MemcachedSpecV1alpha1 struct {
	Size          int32  `json:"size"`
	Image         string `json:"image"`
	ConfigMapName string `json:"configMapName,omitempty"`
}

// ObjectV1alpha1 is one Memcached at v1alpha1. Its status is v1beta1's.
type ObjectV1alpha1 = kube.Object[MemcachedSpecV1alpha1, MemcachedStatus]

var (
	specV1alpha1   MemcachedSpecV1alpha1
	objectV1alpha1 ObjectV1alpha1

	// V1alpha1 is Memcached's version v1alpha1, still served: the API
	// server converts a Memcached written or read at it through the App's
	// conversion webhook, with ToV1beta1 and FromV1beta1. It is
	// Preserving, so a v1beta1 Memcached's resources, which v1alpha1 has
	// no field for, survive a write through v1alpha1 (in the annotation
	// conversion.PreservedAnnotation). Its Rules and columns are
	// v1beta1's, of its own types.
	V1alpha1 = kube.NewVersion("v1alpha1", ToV1beta1, FromV1beta1, kube.VersionOptions{
		Columns: kube.Columns(&objectV1alpha1,
			kube.PrinterColumn("Ready", &objectV1alpha1.Status.Conditions).Condition("Available"),
			kube.PrinterColumn("Size", &objectV1alpha1.Spec.Size),
			kube.PrinterColumn("Age", &objectV1alpha1.CreationTimestamp),
		),
		Rules: []kube.TypeRules{
			kube.Rules(&specV1alpha1,
				kube.Field(&specV1alpha1.Size).Minimum(1).Maximum(3).Description("How many memcached pods run."),
				kube.Field(&specV1alpha1.Image).Pattern(regexp.MustCompile(`^memcached:`)).Default("memcached:1.6.26-alpine3.19"),
				kube.Field(&specV1alpha1.ConfigMapName).Description("The ConfigMap, in the Memcached's namespace, whose data are memcached's options: each key a long option, such as memory-limit, and its value the option's, such as \"64\" for --memory-limit=64. A change to it rolls the pods."),
			),
			statusRules,
		},
		Preserving: true,
	})
)

// ToV1beta1 converts a v1alpha1 Memcached to v1beta1, the hub: every
// field is v1beta1's, and Resources is nil (V1alpha1's Preserving restores
// it from its annotation).
func ToV1beta1(src *ObjectV1alpha1, dst *Object) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec = MemcachedSpec{Size: src.Spec.Size, Image: src.Spec.Image, ConfigMapName: src.Spec.ConfigMapName}
	dst.Status = src.Status
	return nil
}

// FromV1beta1 converts a v1beta1 Memcached to v1alpha1, leaving out its
// Resources.
func FromV1beta1(src *Object, dst *ObjectV1alpha1) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec = MemcachedSpecV1alpha1{Size: src.Spec.Size, Image: src.Spec.Image, ConfigMapName: src.Spec.ConfigMapName}
	dst.Status = src.Status
	return nil
}
