package kube

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"

	gojson "github.com/goccy/go-json"
	"google.golang.org/protobuf/encoding/protowire"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The Reconciler's creations of the resources its controller Owns don't
// come back as work either. A Reconciler applies its Deployment and reads
// the Deployment the apply returns; the informer then hands that same
// Deployment back, and Owns would queue its owner to be reconciled again,
// only to apply the same Deployment once more: a second reconcile and a
// second write an object, for nothing (issue 13 measured 998 such writes
// after 1,000 Memcacheds had converged).
//
// So the Client's transport notes each write a reconcile makes to an
// owned resource, through any client-go client built on Client.Config: a
// PATCH (a server-side apply among them), a PUT or a POST, of the object or
// its status. When the API server answers 201 Created, with JSON or
// protobuf, the object's uid and resourceVersion are the reconcile's own
// write, kept under the key of the owner being reconciled. Owns' event of
// that exact version, for that owner, isn't queued; any other is, a change
// that lands between the write and its event included, since it has a
// resourceVersion of its own. The Reconciler's write made that version,
// and the Reconciler saw what it returned, so it is no news to it.
// ownWrites holds an owned object's events while a write to it is in
// flight, as it does the resource's, since an event can come before its
// write's response does.
//
// Only a creation counts. A write that changes an object that exists
// answers 200, and so does one that changes nothing, such as an apply of
// what is already there, which returns the object at the resourceVersion
// of whatever change came last: another writer's, say the Deployment
// controller's status update, landed after the Reconciler read the
// Deployment and before it applied. Nothing in the answer tells the two
// apart, and the Reconciler that read the Deployment before that change
// must see it. So the event of an update's version queues its owner, as
// before: a changed Deployment reconciles its Memcached once more.
//
// A write made through a client that isn't built on Client.Config, or with
// a context that isn't the reconcile's, isn't seen, and its event queues
// its owner as before. A creation whose labels an Owns' LabelSelector
// doesn't select isn't kept: that Owns hears nothing of the object, so no
// event would ever come to match it.

// noteOwnedWrite sends req, a write of the reconcile of key, through
// next, noting it first if it writes a resource c Owns: the body of a
// reconcile's writeHook (scope.go, transport.go).
func (c *Controller) noteOwnedWrite(key string, req *http.Request, next http.RoundTripper) (*http.Response, error) {
	w, ok := c.ownedWrite(key, req)
	if !ok {
		return next.RoundTrip(req)
	}
	// A POST names its object in its body, not its path: its key is known
	// only from the answer, so its events aren't held meanwhile.
	if w.name != "" {
		c.ownedWrites.writing(w.key(w.name))
		// A panic below, which the reconcile recovers, still ends the
		// write: left in flight, the object's events would be held for
		// good.
		defer func() {
			if p := recover(); p != nil {
				c.ownedWrites.wrote(w.key(w.name), nil)
				panic(p)
			}
		}()
	}
	resp, err := next.RoundTrip(req)
	got := writtenObject(resp, err)
	if got != nil {
		// Only an object the reconciled owner controls: Owns' events of
		// any other queue their own controller, and a write kept for them
		// would never be matched.
		if owner, ok := c.ownerKey(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: got.Metadata.Namespace, OwnerReferences: got.Metadata.OwnerReferences,
		}}); !ok || owner != key {
			got = nil
		}
	}
	if got != nil && !w.selects(got.Metadata.Labels) {
		// A label-selected Owns that doesn't see the object: no event
		// would come to match a write kept for it.
		got = nil
	}
	switch {
	case w.name != "":
		c.ownedWrites.wrote(w.key(w.name), got.version(w.namespace, w.name))
	case got != nil && got.Metadata.Name != "" && got.Metadata.Namespace == w.namespace:
		// A POST's events weren't held: the creation's event may have
		// come already, and then nothing is left to match it.
		key := w.key(got.Metadata.Name)
		v := got.version(w.namespace, got.Metadata.Name)
		c.ownedWrites.writing(key)
		c.ownedWrites.wroteCached(key, v, c.ownedCached(w, got.Metadata.Name, v))
	}
	return resp, err
}

// ownedWriteTarget is a write to an owned resource, as its request's path
// names it, by the reconcile of owner.
type ownedWriteTarget struct {
	owner     string
	gvr       schema.GroupVersionResource // the Owns' resource, whose cache holds the object
	selectors []string                    // the label selectors of the Owns of its group and resource, "" for every object
	namespace string
	name      string // "" for a POST
}

// selects reports whether an Owns of w's group and resource, at any of
// its versions, watches an object with labels: one without a label
// selector watches every one. A selector that doesn't parse, which
// NewController refuses, selects none.
func (w ownedWriteTarget) selects(objLabels map[string]string) bool {
	for _, s := range w.selectors {
		if s == "" {
			return true
		}
		if sel, err := labels.Parse(s); err == nil && sel.Matches(labels.Set(objLabels)) {
			return true
		}
	}
	return false
}

// key is the ownWrites key of the object name of w's resource and
// namespace, written by w's owner's reconcile: Owns' handler builds the
// same from an event's object and its controller owner reference.
func (w ownedWriteTarget) key(name string) string {
	return ownedWriteKey(w.owner, w.gvr.GroupResource(), w.namespace, name)
}

// ownedWriteKey is the ownWrites key of an owned object: its owner's key,
// its resource, and its namespace and name. Versions of one resource name
// one object, so the version is left out.
func ownedWriteKey(owner string, gr schema.GroupResource, namespace, name string) string {
	return owner + "\x00" + gr.String() + "\x00" + namespace + "/" + name
}

// ownedWrite reports whether req, made by the reconcile of owner, writes
// an object of a resource the controller Owns, or its status, and which.
// It reads the path as the API server's request info does:
// /api/v1/[namespaces/NS/]RESOURCE[/NAME[/status]] for the core group,
// /apis/GROUP/VERSION/... for the others, after any prefix of Host's.
func (c *Controller) ownedWrite(owner string, req *http.Request) (ownedWriteTarget, bool) {
	if req.URL == nil || len(c.owns) == 0 {
		return ownedWriteTarget{}, false
	}
	p := req.URL.Path
	var gv []string
	var rest string
	if i := strings.Index(p, "/api/"); i >= 0 && (strings.Index(p, "/apis/") < 0 || i < strings.Index(p, "/apis/")) {
		parts := strings.SplitN(p[i+len("/api/"):], "/", 2)
		if len(parts) < 2 {
			return ownedWriteTarget{}, false
		}
		gv, rest = []string{"", parts[0]}, parts[1]
	} else if i := strings.Index(p, "/apis/"); i >= 0 {
		parts := strings.SplitN(p[i+len("/apis/"):], "/", 3)
		if len(parts) < 3 {
			return ownedWriteTarget{}, false
		}
		gv, rest = parts[:2], parts[2]
	} else {
		return ownedWriteTarget{}, false
	}
	segs := strings.Split(rest, "/")
	w := ownedWriteTarget{owner: owner}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		w.namespace, segs = segs[1], segs[2:]
	}
	switch {
	case len(segs) == 1 && req.Method == http.MethodPost:
	case len(segs) == 2 && req.Method != http.MethodPost, len(segs) == 3 && segs[2] == "status" && req.Method != http.MethodPost:
		w.name = segs[1]
	default:
		return ownedWriteTarget{}, false
	}
	for _, o := range c.owns {
		if o.gvr.Group == gv[0] && o.gvr.Resource == segs[0] {
			if w.selectors == nil {
				w.gvr = o.gvr
			}
			w.selectors = append(w.selectors, o.selector)
		}
	}
	if w.selectors == nil {
		return ownedWriteTarget{}, false
	}
	return w, w.name != "" || req.Method == http.MethodPost
}

// ownedCached reports whether the Owns cache of w's resource holds the
// object name in w's namespace at version v or a newer one already: v's
// event has come, at least as far as the cache, and if another writer
// changed the object before the answer came (the Deployment controller
// writes a new Deployment's status at once), so has that change's. It
// reports false for a nil v, for another object of the same name, or
// before the cache is started.
func (c *Controller) ownedCached(w ownedWriteTarget, name string, v *objectVersion) bool {
	ch := c.caches[w.gvr]
	if v == nil || ch == nil {
		return false
	}
	inf := ch.informer.Load()
	if inf == nil {
		return false
	}
	cached := cachedVersion((*inf).GetIndexer(), objectKey(w.namespace, name))
	return cached.uid == v.uid && newerOrSame(cached.resourceVersion, v.resourceVersion)
}

// writtenMetadata is what a write's answer tells of the object written:
// its metadata.
type writtenMetadata struct {
	Metadata metav1.ObjectMeta
}

// version is the object version w names, or nil if w is nil or names
// another object than namespace/name.
func (w *writtenMetadata) version(namespace, name string) *objectVersion {
	if w == nil || w.Metadata.Name != name || w.Metadata.Namespace != namespace || w.Metadata.ResourceVersion == "" {
		return nil
	}
	return &objectVersion{uid: w.Metadata.UID, resourceVersion: w.Metadata.ResourceVersion}
}

// The media types of a write's answer that writtenObject reads: client-go's
// typed clients ask for protobuf (rest.CodecFactoryForGeneratedClient),
// its dynamic client and a custom resource's answers are JSON.
const (
	mediaTypeJSON     = "application/json"
	mediaTypeProtobuf = "application/vnd.kubernetes.protobuf"
)

// protobufPrefix begins every protobuf answer of the API server's, before
// its runtime.Unknown envelope (apimachinery's
// pkg/runtime/serializer/protobuf).
var protobufPrefix = []byte("k8s\x00")

// writtenObject reads the metadata of the object a write's answer holds,
// when the write created it, and gives resp a body that reads as the
// answer did: its bytes, and then any error reading them ended in. It
// returns nil for a failed request, an answer other than 201 Created, one
// that is neither JSON nor protobuf, or one that doesn't decode.
func writtenObject(resp *http.Response, err error) *writtenMetadata {
	if err != nil || resp == nil || resp.Body == nil || resp.StatusCode != http.StatusCreated {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	isJSON, isProtobuf := strings.HasPrefix(ct, mediaTypeJSON), strings.HasPrefix(ct, mediaTypeProtobuf)
	if !isJSON && !isProtobuf {
		return nil
	}
	b, readErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var body io.Reader = bytes.NewReader(b)
	if readErr != nil {
		body = io.MultiReader(body, errReader{readErr})
	}
	resp.Body = io.NopCloser(body)
	if readErr != nil {
		return nil
	}
	var w writtenMetadata
	if isJSON {
		// Only the fields read: the managed fields are often the larger
		// part of the metadata.
		var j struct {
			Metadata struct {
				Name            string                  `json:"name"`
				Namespace       string                  `json:"namespace"`
				UID             types.UID               `json:"uid"`
				ResourceVersion string                  `json:"resourceVersion"`
				Labels          map[string]string       `json:"labels"`
				OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
			} `json:"metadata"`
		}
		if gojson.Unmarshal(b, &j) != nil {
			return nil
		}
		w.Metadata = metav1.ObjectMeta{Name: j.Metadata.Name, Namespace: j.Metadata.Namespace, UID: j.Metadata.UID,
			ResourceVersion: j.Metadata.ResourceVersion, Labels: j.Metadata.Labels, OwnerReferences: j.Metadata.OwnerReferences}
		return &w
	}
	if !bytes.HasPrefix(b, protobufPrefix) {
		return nil
	}
	m, err := metadataFromProtobuf(b[len(protobufPrefix):])
	if err != nil {
		return nil
	}
	w.Metadata = m
	return &w
}

// metadataFromProtobuf reads the name, namespace, uid, resourceVersion,
// labels and owner references of the object in a runtime.Unknown
// envelope, the API server's protobuf encoding less its prefix: the
// envelope's field 2 is the object, an object's field 1 its ObjectMeta (as
// PartialObjectMetadata's is), whose fields 1, 3, 5, 6, 11 and 13 are
// those (apimachinery's generated.proto), the labels a map, whose entries
// are messages of a key (1) and a value (2). The managed fields, often the
// larger part of the metadata, are skipped undecoded.
func metadataFromProtobuf(b []byte) (metav1.ObjectMeta, error) {
	var m metav1.ObjectMeta
	raw, err := protoBytesField(b, 2)
	if err != nil {
		return m, err
	}
	meta, err := protoBytesField(raw, 1)
	if err != nil {
		return m, err
	}
	err = protoFields(meta, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 11:
			var key, value string
			if err := protoFields(v, func(num protowire.Number, e []byte) error {
				switch num {
				case 1:
					key = string(e)
				case 2:
					value = string(e)
				}
				return nil
			}); err != nil {
				return err
			}
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[key] = value
		case 13:
			var ref metav1.OwnerReference
			if err := ref.Unmarshal(v); err != nil {
				return err
			}
			m.OwnerReferences = append(m.OwnerReferences, ref)
		}
		return nil
	})
	return m, err
}

// errProtobuf is the error of a message that doesn't parse.
var errProtobuf = errors.New("kube: a protobuf message that doesn't parse")

// protoFields calls f with the number and bytes of each length-delimited
// field of the protobuf message b, and skips the others.
func protoFields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errProtobuf
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errProtobuf
			}
			if err := f(num, v); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return errProtobuf
		}
		b = b[n:]
	}
	return nil
}

// protoBytesField is the last length-delimited field numbered num of the
// protobuf message b, as a message's last value of a field wins.
func protoBytesField(b []byte, num protowire.Number) ([]byte, error) {
	var field []byte
	err := protoFields(b, func(n protowire.Number, v []byte) error {
		if n == num {
			field = v
		}
		return nil
	})
	return field, err
}

// errReader returns err from every Read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
