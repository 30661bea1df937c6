package kube

import (
	"context"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The controller's writes to its own objects, the finalizer's and the
// status's, are server-side applies under its field manager, forced, that
// name the object by its uid. The helpers here are shared by the
// reconcile (reconcile.go), the finalizer (finalizers.go) and the
// annotation on an object that can't be decoded (undecodable.go).

// applyObject is the start of an apply to u: its apiVersion, its kind,
// and its metadata's name, namespace and uid. The uid makes the apply fail
// rather than create an object deleted since the cache saw it (an apply to
// an object that doesn't exist creates it), or change another object of
// the same name: the API server's patch handler refuses "uid mismatch".
func (c *Controller) applyObject(u *cachedObject) *unstructured.Unstructured {
	md := map[string]any{"name": u.name}
	if u.namespace != "" {
		md["namespace"] = u.namespace
	}
	if u.uid != "" {
		md["uid"] = string(u.uid)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.gvr.GroupVersion().String(),
		"kind":       c.kind,
		"metadata":   md,
	}}
}

// applyMetadata applies u's metadata with the fields of md, such as
// finalizers and annotations, beside its name, namespace and uid, by
// server-side apply under the controller's field manager, forced. A field
// the controller's field manager set before and md leaves out is removed.
// It returns the API server's error as it is.
func (c *Controller) applyMetadata(ctx context.Context, u *cachedObject, md map[string]any) error {
	apply := c.applyObject(u)
	maps.Copy(apply.Object["metadata"].(map[string]any), md)
	return c.applyOwn(ctx, u, "", apply)
}

// applyOwn applies apply to u, or to its subresource ("" for none), by
// server-side apply under the controller's field manager, forced, as the
// controller's own write (ownwrites.go). It applies through the
// cachedClient, which reads only the version of the object the API server
// returns, or the dynamic client when there is none (client-go's fakes).
// It returns the API server's error as it is.
func (c *Controller) applyOwn(ctx context.Context, u *cachedObject, subresource string, apply *unstructured.Unstructured) error {
	opts := metav1.ApplyOptions{FieldManager: c.settings.Name, Force: true}
	return c.own.apply(u.key(), func() (*objectVersion, error) {
		if cc := c.clients.cached; cc != nil {
			b, err := apply.MarshalJSON()
			if err != nil {
				return nil, err
			}
			return cc.apply(ctx, c.gvr, u.namespace, u.name, subresource, b, opts)
		}
		ri := c.clients.dynamic.Resource(c.gvr).Namespace(u.namespace)
		var res *unstructured.Unstructured
		var err error
		if subresource == "status" {
			res, err = ri.ApplyStatus(ctx, u.name, apply, opts)
		} else {
			res, err = ri.Apply(ctx, u.name, apply, opts)
		}
		if err != nil || res == nil {
			return nil, err
		}
		return &objectVersion{uid: res.GetUID(), resourceVersion: res.GetResourceVersion()}, nil
	})
}

// describe names u in errors, as its kind and namespace/name.
func (c *Controller) describe(u *cachedObject) string {
	if ns := u.GetNamespace(); ns != "" {
		return c.kind + " " + ns + "/" + u.GetName()
	}
	return c.kind + " " + u.GetName()
}
