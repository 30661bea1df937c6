package kube

import (
	"github.com/z5labs/humus/kube/internal/objcache"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// newCachedObject is u as the resource's cache holds it.
func newCachedObject(u *unstructured.Unstructured) (*cachedObject, error) {
	return objcache.NewObject(u)
}

// newCachedMetadata is m as an owned resource's cache holds it.
func newCachedMetadata(m *metav1.PartialObjectMetadata) *cachedObject {
	return objcache.NewMetadata(m)
}

// cachedOfJSON is the object whose JSON is raw as the resource's cache
// reads it, or an object with no JSON when the cache can't read it.
func cachedOfJSON(raw string) *cachedObject {
	if obj, err := objcache.ObjectFromJSON([]byte(raw)); err == nil {
		if c, ok := obj.(*cachedObject); ok {
			return c
		}
	}
	return &cachedObject{}
}
