// Package app is the Memcached operator of the kubebuilder book, written as
// a humus App with github.com/z5labs/humus/kube: its types and Rules, a
// Reconciler that applies the Deployment each Memcached controls, a
// finalizer, and an Init that sources its Connection and Settings with the
// humus config package, in a pod or from a kubeconfig.
//
// cmd/memcached runs it with humus.Main; ../deploy holds what a cluster needs
// to run it: the CRD, which TestMemcachedCRD keeps true to the types, the
// ServiceAccount, its RBAC and the Deployment.
package app

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"
)

// MemcachedSpec is what a Memcached declares, at v1beta1: how many
// memcached pods run, their image, the ConfigMap, if any, that holds
// memcached's options, and the compute resources of memcached's container,
// which only v1beta1 has.
type MemcachedSpec struct {
	Size          int32  `json:"size"`
	Image         string `json:"image"`
	ConfigMapName string `json:"configMapName,omitempty"`
	// Resources are memcached's container's requests and limits; nil sets
	// none. v1alpha1 has no such field: a Memcached written at v1alpha1
	// keeps them through the annotation of a Preserving version.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// MemcachedStatus is what the controller reports: the ready replicas of the
// Deployment it applied, and its conditions, of which it writes Available.
type MemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

var (
	spec   MemcachedSpec
	status MemcachedStatus
	object Object

	// Memcached is the custom resource memcacheds.cache.example.com, of
	// two versions: v1beta1, the controller's, stored, and the hub of
	// conversion, and v1alpha1 (see V1alpha1), still served, which the
	// App's conversion webhook converts. Its Rules are the book's
	// validation markers as typed values: a Size from 1 to 3, and an
	// Image that starts with "memcached:" and defaults to
	// memcached:1.6.26-alpine3.19, and an optional ConfigMapName. kubectl
	// get mc shows whether each is READY (its Available condition), its
	// SIZE and its AGE.
	Memcached = kube.Resource[MemcachedSpec, MemcachedStatus]{
		Group:      "cache.example.com",
		Version:    "v1beta1",
		Kind:       "Memcached",
		Plural:     "memcacheds",
		Scope:      kube.Namespaced,
		ShortNames: []string{"mc"},
		Columns: kube.Columns(&object,
			kube.PrinterColumn("Ready", &object.Status.Conditions).Condition("Available"),
			kube.PrinterColumn("Size", &object.Spec.Size),
			kube.PrinterColumn("Age", &object.CreationTimestamp),
		),
		Rules: []kube.TypeRules{
			kube.Rules(&spec,
				kube.Field(&spec.Size).Minimum(1).Maximum(3).Description("How many memcached pods run."),
				kube.Field(&spec.Image).Pattern(regexp.MustCompile(`^memcached:`)).Default("memcached:1.6.26-alpine3.19"),
				kube.Field(&spec.Resources).Description("The compute resources of memcached's container: its requests and limits, such as limits: {memory: 64Mi}. Only v1beta1 has it; a Memcached written at v1alpha1 keeps it."),
				kube.Field(&spec.ConfigMapName).Description("The ConfigMap, in the Memcached's namespace, whose data are memcached's options: each key a long option, such as memory-limit, and its value the option's, such as \"64\" for --memory-limit=64. A change to it rolls the pods."),
			),
			statusRules,
		},
		Versions: []kube.Version[MemcachedSpec, MemcachedStatus]{V1alpha1},
		// The Service in front of every replica's webhook server
		// (deploy/service.yaml), at conversion.Path.
		ConversionWebhook: kube.WebhookClient{Namespace: "memcached-system", Name: "memcached-webhooks"},
	}

	statusRules = kube.Rules(&status,
		kube.Field(&status.Conditions).ListMap("type"),
	)
)

// Object is one Memcached, as the controller hands it to the Reconciler.
type Object = kube.Object[MemcachedSpec, MemcachedStatus]
