package objcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Client lists and watches a resource's objects as cachedObjects,
// read from the API server's JSON by cachedFromJSON (scan.go). It is
// client-go's REST client, as the dynamic client's list and watch use it,
// with a codec of its own in place of the unstructured one.
type Client struct {
	rest rest.Interface
}

// NewClient builds the Client of cfg, the controller's connection's config.
func NewClient(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = cachedCodec{}
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc}, nil
}

// parameterVersion is the version list and watch options are encoded as,
// the dynamic client's.
var parameterVersion = schema.GroupVersion{Version: "v1"}

// path is the path of gvr's objects in namespace, all namespaces for "".
func path(gvr schema.GroupVersionResource, namespace string) []string {
	p := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		p = []string{"/api", gvr.Version}
	}
	if namespace != "" {
		p = append(p, "namespaces", namespace)
	}
	return append(p, gvr.Resource)
}

// List lists gvr's objects in namespace with opts.
func (c *Client) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*List, error) {
	b, err := c.listJSON(ctx, gvr, namespace, opts)
	if err != nil {
		return nil, err
	}
	return listFromJSON(b)
}

// listJSON is the JSON of the list of gvr's objects in namespace with
// opts, or the API server's error.
func (c *Client) listJSON(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) ([]byte, error) {
	return body(c.rest.Get().AbsPath(path(gvr, namespace)...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, parameterVersion).
		Do(ctx))
}

// body is r's body, or its error: the API server's Status as an
// apierrors.StatusError, as client-go's clients return it.
func body(r rest.Result) ([]byte, error) {
	if err := r.Error(); err != nil {
		return nil, err
	}
	return r.Raw()
}

// Versions lists gvr's objects in namespace with opts, and returns each
// one's resourceVersion by its cache key (namespace/name, or name), the
// list's resourceVersion, and its continue token.
func (c *Client) Versions(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions, versions map[string]string) (listRV, next string, err error) {
	b, err := c.listJSON(ctx, gvr, namespace, opts)
	if err != nil {
		return "", "", err
	}
	lm, err := scanList(b, func(item []byte) error {
		ns, name, v, err := versionFromJSON(item)
		versions[key(ns, name)] = v.ResourceVersion
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("objcache: reading a list of %s: %w", gvr, err)
	}
	return lm.ResourceVersion, lm.Continue, nil
}

// Apply applies applyJSON, an apply configuration's JSON, to the object name of
// gvr in namespace, or to its subresource ("" for none), with opts, and
// returns the version of the object the API server returned.
func (c *Client) Apply(ctx context.Context, gvr schema.GroupVersionResource, namespace, name, subresource string, applyJSON []byte, opts metav1.ApplyOptions) (*Version, error) {
	p := append(path(gvr, namespace), name)
	if subresource != "" {
		p = append(p, subresource)
	}
	patchOpts := opts.ToPatchOptions()
	b, err := body(c.rest.Patch(types.ApplyPatchType).AbsPath(p...).
		SpecificallyVersionedParams(&patchOpts, metav1.ParameterCodec, parameterVersion).
		Body(applyJSON).Do(ctx))
	if err != nil {
		return nil, err
	}
	_, _, v, err := versionFromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("objcache: reading the object an apply to %s %s returned: %w", gvr, key(namespace, name), err)
	}
	return &v, nil
}

// Watch watches gvr's objects in namespace with opts.
func (c *Client) Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().AbsPath(path(gvr, namespace)...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, parameterVersion).
		Watch(ctx)
}

// List is a list of cachedObjects, as the reflector reads a list:
// its metadata, and its items.
type List struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*Object
}

func (l *List) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]*Object(nil), l.Items...)
	return &c
}

// listFromJSON reads a list's JSON: its metadata, and each item as
// ObjectFromJSON does.
func listFromJSON(b []byte) (*List, error) {
	l := &List{}
	lm, err := scanList(b, func(item []byte) error {
		obj, err := ObjectFromJSON(item)
		if err != nil {
			return err
		}
		c, ok := obj.(*Object)
		if !ok {
			return fmt.Errorf("objcache: a list's item is a %T", obj)
		}
		l.Items = append(l.Items, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objcache: reading a list: %w", err)
	}
	l.ListMeta = lm
	return l, nil
}

// scanList reads a list's JSON: it returns its metadata, and calls item
// with the JSON of each of its items, in order.
func scanList(b []byte, item func([]byte) error) (metav1.ListMeta, error) {
	var lm metav1.ListMeta
	_, err := scanFields(b, scanSpace(b, 0), func(f field) error {
		switch {
		case f.is("metadata"):
			return json.Unmarshal(b[f.valueStart:f.end], &lm)
		case f.is("items") && string(b[f.valueStart:f.end]) != "null":
			_, err := scanElements(b, f.valueStart, func(start, end int) error { return item(b[start:end]) })
			return err
		}
		return nil
	})
	return lm, err
}

// ObjectFromJSON is the object whose JSON is b: a *metav1.Status for
// a Status, as a watch's error event holds, and otherwise a *Object,
// read by cachedFromJSON or, from JSON it doesn't read, decoded as
// client-go's dynamic client decodes it and then made an Object as
// the informer's transform makes one (NewObject).
func ObjectFromJSON(b []byte) (runtime.Object, error) {
	s, err := cachedFromJSON(b)
	switch {
	case err == nil && s.status:
		st := &metav1.Status{}
		if err := json.Unmarshal(b, st); err != nil {
			return nil, fmt.Errorf("objcache: decoding a Status: %w", err)
		}
		return st, nil
	case err == nil:
		return s.obj, nil
	case !errors.Is(err, errNotScanned):
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, err
	}
	return NewObject(u)
}

// cachedCodec is the Client's serializer of JSON: it decodes a
// watch's event envelope, metav1.WatchEvent, leaving its object undecoded;
// an object, as ObjectFromJSON does; and a metav1.Status, which the
// REST client asks of every answer. It encodes nothing: the Client
// sends no body.
type cachedCodec struct{}

var _ runtime.NegotiatedSerializer = cachedCodec{}

func (cachedCodec) SupportedMediaTypes() []runtime.SerializerInfo {
	return []runtime.SerializerInfo{{
		MediaType:        runtime.ContentTypeJSON,
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       cachedCodec{},
		StreamSerializer: &runtime.StreamSerializerInfo{
			EncodesAsText: true,
			Serializer:    cachedCodec{},
			Framer:        jsonFramer{},
		},
	}}
}

func (cachedCodec) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}

func (cachedCodec) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}

func (cachedCodec) Encode(obj runtime.Object, _ io.Writer) error {
	return fmt.Errorf("objcache: the cache's client encodes nothing, asked to encode a %T", obj)
}

func (cachedCodec) Identifier() runtime.Identifier { return "humus-kube-cached-json" }

func (cachedCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case *metav1.WatchEvent:
		// The object's bytes are data's, which the stream decoder reuses
		// for its next event: they are decoded, and copied, before then
		// (client-go's rest/watch Decoder).
		_, err := scanFields(data, scanSpace(data, 0), func(f field) error {
			switch {
			case f.is("type"):
				into.Type = eventType(data[f.valueStart:f.end])
			case f.is("object"):
				into.Object.Raw = data[f.valueStart:f.end]
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("objcache: reading a watch event: %w", err)
		}
		return into, nil, nil
	case *metav1.Status:
		s, err := cachedFromJSON(data)
		if err != nil || !s.status {
			return nil, nil, errors.New("objcache: not a Status")
		}
		if err := json.Unmarshal(data, into); err != nil {
			return nil, nil, err
		}
		return into, nil, nil
	case nil:
		obj, err := ObjectFromJSON(data)
		return obj, nil, err
	default:
		return nil, nil, fmt.Errorf("objcache: the cache's client decodes no %T", into)
	}
}

// eventType is the watch event type the JSON string t names, without
// copying it for the five there are, or t's text.
func eventType(t []byte) string {
	for _, e := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if len(t) == len(e)+2 && string(t[1:len(t)-1]) == string(e) {
			return string(e)
		}
	}
	return string(t)
}

// GetObjectKind is an Object's kind, which it doesn't keep: empty.
func (c *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns a copy of c, which shares c's strings and rare
// fields: an Object is read-only once cached.
func (c *Object) DeepCopyObject() runtime.Object {
	d := *c
	return &d
}
