package objcache

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// object is package kube's Object, which the cache's objects decode into:
// its JSON shape, without importing kube.
type object[Spec, Status any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec"`
	Status Status `json:"status,omitempty"`
}

// The spec and status of package kube's benchmarks' 4 KiB object.
type benchSpec struct {
	Image     string            `json:"image"`
	Replicas  int32             `json:"replicas"`
	Args      []string          `json:"args,omitempty"`
	Env       []benchEnv        `json:"env,omitempty"`
	Resources map[string]string `json:"resources,omitempty"`
}

type benchEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type benchStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

type benchObject = object[benchSpec, benchStatus]

// The converge benchmark's Memcached (bench/internal/memcached).
type benchMemcachedSpec struct {
	Size  int32  `json:"size"`
	Image string `json:"image"`
}

type benchMemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}
