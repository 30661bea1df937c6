package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/objcache"
)

// The controller's writes to its own objects, the finalizer's and the
// status's, are server-side applies under its field manager, forced, that
// name the object by its uid. The helpers here are shared by the
// reconcile (reconcile.go), the finalizer (finalizers.go) and the
// annotation on an object that can't be decoded (undecodable.go).

// applyBody is the JSON of an apply to u: its apiVersion, its kind, and
// its metadata's name, namespace and uid, with md's fields beside them,
// and, unless field is "", field with the JSON value value. The uid makes
// the apply fail rather than create an object deleted since the cache saw
// it (an apply to an object that doesn't exist creates it), or change
// another object of the same name: the API server's patch handler refuses
// "uid mismatch".
func (c *Controller) applyBody(u *cachedObject, md map[string]any, field string, value json.RawMessage) ([]byte, error) {
	m := map[string]any{"name": u.GetName()}
	if u.GetNamespace() != "" {
		m["namespace"] = u.GetNamespace()
	}
	if u.GetUID() != "" {
		m["uid"] = string(u.GetUID())
	}
	maps.Copy(m, md)
	obj := map[string]any{
		"apiVersion": c.gvr.GroupVersion().String(),
		"kind":       c.kind,
		"metadata":   m,
	}
	if field != "" {
		obj[field] = value
	}
	return json.Marshal(obj)
}

// applyMetadata applies u's metadata with the fields of md, such as
// finalizers and annotations, beside its name, namespace and uid, by
// server-side apply under the controller's field manager, forced. A field
// the controller's field manager set before and md leaves out is removed.
// It returns the API server's error as it is.
func (c *Controller) applyMetadata(ctx context.Context, u *cachedObject, md map[string]any) error {
	b, err := c.applyBody(u, md, "", nil)
	if err != nil {
		return fmt.Errorf("kube: encoding the apply to %s: %w", c.describe(u), err)
	}
	return c.sendApply(ctx, u, "", b)
}

// sendApply applies applyJSON to u, or to its subresource ("" for none), by
// server-side apply under the controller's field manager, forced, as the
// controller's own write (internal/echoes). It applies through the
// cache's client (objcache.Client), which reads only the version of the object the API server
// returns, or the dynamic client when there is none (client-go's fakes).
// It returns the API server's error as it is.
func (c *Controller) sendApply(ctx context.Context, u *cachedObject, subresource string, applyJSON []byte) error {
	opts := metav1.ApplyOptions{FieldManager: c.settings.Name, Force: true}
	// What the apply writes, which its event may change and still be its
	// own (objcache.ChangedOnly): the controller's finalizer, for an apply of
	// the metadata, or the status fields it names.
	scope := echoes.Scope{Finalizer: c.finalizer}
	if subresource == "status" {
		scope = echoes.Scope{Status: objcache.StatusFields(applyJSON)}
	}
	held := func(v echoes.Version) bool { return c.holds(u.Key(), v.UID) }
	return c.echoes.WriteScoped(u.Key(), scope, held, func() (*echoes.Version, error) {
		if cc := c.clients.cached; cc != nil {
			v, err := cc.Apply(ctx, c.gvr, u.GetNamespace(), u.GetName(), subresource, applyJSON, opts)
			if err != nil {
				return nil, err
			}
			return &echoes.Version{UID: v.UID, ResourceVersion: v.ResourceVersion}, nil
		}
		apply := &unstructured.Unstructured{}
		if err := apply.UnmarshalJSON(applyJSON); err != nil {
			return nil, err
		}
		ri := c.clients.dynamic.Resource(c.gvr).Namespace(u.GetNamespace())
		var res *unstructured.Unstructured
		var err error
		if subresource == "status" {
			res, err = ri.ApplyStatus(ctx, u.GetName(), apply, opts)
		} else {
			res, err = ri.Apply(ctx, u.GetName(), apply, opts)
		}
		if err != nil || res == nil {
			return nil, err
		}
		return &echoes.Version{UID: res.GetUID(), ResourceVersion: res.GetResourceVersion()}, nil
	})
}

// describe names u in errors, as its kind and namespace/name.
func (c *Controller) describe(u *cachedObject) string {
	if ns := u.GetNamespace(); ns != "" {
		return c.kind + " " + ns + "/" + u.GetName()
	}
	return c.kind + " " + u.GetName()
}
