package objcache

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// CompactOwned is the transform of an owned resource's informer that
// caches whole objects (package kube's Owns given CacheObjects): an
// unstructured object becomes a *Object as CompactObject makes one, and
// either keeps its owner references, which Owns reads to find the owner
// an event concerns and which its index by controller owner is built on.
// An Object read straight from the API server's JSON (ObjectFromJSON)
// has its owner references read from its JSON. The references' strings
// are substrings of the Object's JSON, so they cost no memory of their
// own. It is idempotent, as client-go asks of a transform: an Object that
// holds owner references already is returned as it is.
func CompactOwned(obj any) (any, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		refs := o.GetOwnerReferences()
		c, err := NewObject(o)
		if err != nil {
			return nil, err
		}
		c.setOwners(refs)
		return c, nil
	case *Object:
		if len(o.GetOwnerReferences()) > 0 || o.raw == "" {
			return o, nil
		}
		refs, err := ownersFromJSON(o.raw)
		if err != nil {
			return nil, fmt.Errorf("objcache: reading the owner references of %s: %w", o.Key(), err)
		}
		o.setOwners(refs)
		return o, nil
	}
	return obj, nil
}

// setOwners sets c's owner references to refs, their strings made
// substrings of c's JSON.
func (c *Object) setOwners(refs []metav1.OwnerReference) {
	if len(refs) == 0 {
		return
	}
	for i := range refs {
		r := &refs[i]
		r.APIVersion = within(c.raw, r.APIVersion)
		r.Kind = within(c.raw, r.Kind)
		r.Name = within(c.raw, r.Name)
		r.UID = types.UID(within(c.raw, string(r.UID)))
	}
	c.SetOwnerReferences(refs)
}

// ownersFromJSON reads metadata.ownerReferences of the object whose JSON
// is raw; nil if it has none.
func ownersFromJSON(raw string) ([]metav1.OwnerReference, error) {
	b := []byte(raw)
	var refs []metav1.OwnerReference
	_, err := scanMetadata(b, func(f field) error {
		if !f.is("ownerReferences") {
			return nil
		}
		refs = nil
		return json.Unmarshal(b[f.valueStart:f.end], &refs)
	})
	return refs, err
}
