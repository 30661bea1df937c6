package objcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"

	gojson "github.com/goccy/go-json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Object is what the controller's informers cache of one object:
// the resource's objects as their JSON encoding, without managed fields,
// beside the metadata the controller reads without decoding them, read
// straight from the API server's JSON (scan.go), or from an
// unstructured object (NewObject); the owned resources' objects as
// the metadata Owns reads. An unstructured object holds about 5.7 times its JSON in maps and
// interfaces (package kube's BenchmarkCachedObjectBytes); this holds about its JSON. The
// reconcile decodes raw into the user's type, which is then the
// Reconciler's own copy.
//
// It is a metav1.Object, so that client-go's key functions, indexers and
// meta.Accessor read it, and a runtime.Object, so that a reflector takes it
// from a watch. It is read-only once cached: its setters set the
// fields it keeps and ignore the others, and its getters of the others
// return their zero values.
type Object struct {
	// raw is the object's JSON encoding without managed fields; "" for an
	// owned resource's.
	raw string

	// namespace, name, uid and resourceVersion are where their text is:
	// in raw where its bytes hold it, as they do for any name, namespace,
	// uid and resourceVersion that needs no unescaping, or else in
	// rare.text (an owned resource's, which keeps no raw). 8 bytes each in
	// place of a string's 16 keeps an Object at 64 bytes, not 96
	// (BenchmarkWatchesCachedObjectBytes).
	namespace, name, uid, resourceVersion span
	generation                            int64

	// rare holds what few objects have, nil when an object has none of it:
	// 8 bytes in place of 56 on every object.
	rare *cachedRare
}

// span is a string of an Object's: length n at offset off of its raw, or
// of its rare.text when off has inText set.
type span struct{ off, n uint32 }

// inText marks a span's offset as one in rare.text.
const inText = 1 << 31

// str is the text of sp.
func (c *Object) str(sp span) string {
	if sp.n == 0 {
		return ""
	}
	if sp.off&inText != 0 {
		off := sp.off &^ inText
		return c.rare.str()[off : off+sp.n]
	}
	return c.raw[sp.off : sp.off+sp.n]
}

// spanOf is where s is: in raw, if raw's bytes hold s (raw's own memory,
// found without a search, or else the same bytes found by one), or else
// appended to rare.text. A string too long for a span (4 GiB and more,
// which no name, uid or resourceVersion is) is cut to fit.
func (c *Object) spanOf(s string) span {
	if s == "" {
		return span{}
	}
	if len(s) >= inText {
		s = s[:inText-1]
	}
	if off, ok := offsetIn(c.raw, s); ok {
		return span{uint32(off), uint32(len(s))}
	}
	if i := strings.Index(c.raw, s); i >= 0 && i+len(s) < inText {
		return span{uint32(i), uint32(len(s))}
	}
	at := 0
	if c.rare != nil {
		if off, ok := offsetIn(c.rare.str(), s); ok {
			return span{uint32(off) | inText, uint32(len(s))}
		}
		at = int(c.rare.nText)
	}
	if at+len(s) >= inText {
		return span{}
	}
	c.setRare(func(r *cachedRare) { r.setText(r.str() + s) })
	return span{uint32(at) | inText, uint32(len(s))}
}

// offsetIn is the offset of s in within when s's bytes are within's own
// memory, a substring of it: a comparison of addresses, no search.
func offsetIn(within, s string) (int, bool) {
	if len(within) == 0 || len(s) == 0 {
		return 0, false
	}
	w := uintptr(unsafe.Pointer(unsafe.StringData(within)))
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	if p < w || p+uintptr(len(s)) > w+uintptr(len(within)) {
		return 0, false
	}
	return int(p - w), true
}

// cachedRare is the part of an Object that few objects have. Its slices
// and its string are each held as a pointer to their first element and a
// length (finalizerList, ownerReferenceList, str), not as a slice's 24
// bytes or a string's 16: 48 bytes in place of 80 on every object that
// has any of it, as every owned object has its owner references
// (BenchmarkOwnsCachedObjectBytes).
type cachedRare struct {
	deletionTimestamp *metav1.Time
	finalizers        *string

	// ownerReferences are an owned resource's, which Owns reads; nil for
	// the resource's own objects.
	ownerReferences *metav1.OwnerReference

	// text holds the Object's spans that raw doesn't: all of an owned
	// resource's, and a resource's name, namespace, uid or resourceVersion
	// whose JSON string was escaped. It is shorter than inText.
	text *byte

	nFinalizers, nOwnerReferences, nText uint32

	// initialEventsEnd is a watch's bookmark's annotation that its initial
	// events have ended, which client-go's reflector reads.
	initialEventsEnd bool
}

// str is r's text.
func (r *cachedRare) str() string { return unsafe.String(r.text, r.nText) }

// setText sets r's text to s, shorter than inText.
func (r *cachedRare) setText(s string) {
	r.text, r.nText = unsafe.StringData(s), uint32(len(s))
}

// finalizerList is r's finalizers; nil if it has none.
func (r *cachedRare) finalizerList() []string {
	if r.nFinalizers == 0 {
		return nil
	}
	return unsafe.Slice(r.finalizers, r.nFinalizers)
}

// ownerReferenceList is r's owner references; nil if it has none.
func (r *cachedRare) ownerReferenceList() []metav1.OwnerReference {
	if r.nOwnerReferences == 0 {
		return nil
	}
	return unsafe.Slice(r.ownerReferences, r.nOwnerReferences)
}

// NewObject is u as the resource's cache holds it. It removes u's
// managed fields, which the controller never reads and which are often
// the larger part of a small object's metadata.
func NewObject(u *unstructured.Unstructured) (*Object, error) {
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("objcache: encoding %s %s for the cache: %w", u.GetKind(), u.GetName(), err)
	}
	raw := string(b)
	c := &Object{raw: raw, generation: u.GetGeneration()}
	c.SetNamespace(u.GetNamespace())
	c.SetName(u.GetName())
	c.SetUID(u.GetUID())
	c.SetResourceVersion(u.GetResourceVersion())
	c.SetDeletionTimestamp(u.GetDeletionTimestamp())
	if fs := u.GetFinalizers(); len(fs) > 0 {
		for i, f := range fs {
			fs[i] = within(raw, f)
		}
		c.SetFinalizers(fs)
	}
	return c, nil
}

// NewMetadata is m as an owned resource's cache holds it: only what
// Owns reads, its name, namespace, uid, resourceVersion and owner
// references.
func NewMetadata(m *metav1.PartialObjectMetadata) *Object {
	c := &Object{}
	c.SetOwnerReferences(m.OwnerReferences)
	// One string holds the four, which the spans point into.
	ns, name, uid := len(m.Namespace), len(m.Name), len(m.UID)
	text := m.Namespace + m.Name + string(m.UID) + m.ResourceVersion
	if text != "" && len(text) < inText {
		c.setRare(func(r *cachedRare) { r.setText(text) })
	}
	c.SetNamespace(text[:ns])
	c.SetName(text[ns : ns+name])
	c.SetUID(types.UID(text[ns+name : ns+name+uid]))
	c.SetResourceVersion(text[ns+name+uid:])
	return c
}

// within returns s as a substring of raw if raw holds its bytes, or else s.
func within(raw, s string) string {
	if s == "" {
		return ""
	}
	if i := strings.Index(raw, s); i >= 0 {
		return raw[i : i+len(s)]
	}
	return s
}

// CompactObject is the resource's informer's transform: an unstructured
// object becomes a *Object. It is idempotent, as client-go asks of a
// transform.
func CompactObject(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return NewObject(u)
	}
	return obj, nil
}

// CompactMetadata is the owned resources' informers' transform: a
// *metav1.PartialObjectMetadata becomes a *Object of the metadata
// Owns reads. It is idempotent, as client-go asks of a transform.
func CompactMetadata(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return NewMetadata(m), nil
	}
	return obj, nil
}

// Decode decodes c's JSON into obj as encoding/json does, honouring json
// tags and json.Unmarshaler, and names the field of an object that doesn't
// fit obj's type. The decode is the caller's copy: nothing it shares is the
// cache's.
//
// apimachinery's unstructured converter is faster on an unstructured object
// (package kube's BenchmarkDecode), but it converts a number to a narrower field silently,
// so a size of 1<<40 in an int32 would reach the Reconciler as 0, and -1 in
// a uint8 as 255. A number that doesn't fit its field is an error here,
// retried like any other.
func (c *Object) Decode(obj any) error {
	return c.DecodeAs(obj, FastDecodable(reflect.TypeOf(obj)))
}

// DecodeAs is Decode with FastDecodable(obj's type) found by the caller,
// once for its type.
func (c *Object) DecodeAs(obj any, fast bool) error {
	if c.raw == "" {
		return errors.New("the cache holds only its metadata")
	}
	return decodeJSON([]byte(c.raw), obj, fast)
}

// decodeJSON decodes raw into obj, a non-nil pointer, with the result
// encoding/json.Unmarshal gives, and names the field of an object that
// doesn't fit obj's type. fast must be fastDecodable(obj's type) or false.
//
// It decodes with github.com/goccy/go-json first, a decoder compatible with
// encoding/json that takes about a third of its CPU on a 4 KiB object
// (package kube's BenchmarkDecode), which is most of what the controller adds to a
// reconcile. On any error it decodes again, into a new value, with
// encoding/json, whose result (its error, or its value should it succeed)
// is the one kept: errors, and their field paths, are encoding/json's, and
// a value the two decoders disagree on can only come from encoding/json.
// FuzzDecodeJSON and TestDecodeJSONAgreesWithEncodingJSON hold the two to
// the same values. A type that holds a float or an interface is decoded by
// encoding/json alone: go-json decodes a number too large for a float32
// (1e39) as +Inf without an error, where encoding/json refuses it. So is
// JSON that fastJSON refuses: go-json wraps a 19- or 20-digit number that
// overflows an int64 or a uint64 without an error, and keeps invalid UTF-8
// where encoding/json puts U+FFFD.
func decodeJSON(raw []byte, obj any, fast bool) error {
	ptr := reflect.ValueOf(obj)
	if ptr.Kind() != reflect.Pointer || ptr.IsNil() {
		return json.Unmarshal(raw, obj) // its *json.InvalidUnmarshalError
	}
	if fast && fastJSON(raw) {
		if err := gojson.Unmarshal(raw, obj); err == nil {
			return nil
		}
	}
	fresh := reflect.New(ptr.Type().Elem())
	if err := json.Unmarshal(raw, fresh.Interface()); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return fmt.Errorf("field %s: a JSON %s doesn't fit a Go %v", te.Field, te.Value, te.Type)
		}
		if p := fieldPath(raw, reflect.TypeOf(obj)); p != "" {
			return fmt.Errorf("field %s: %w", p, err)
		}
		return err
	}
	ptr.Elem().Set(fresh.Elem())
	return nil
}

// maxFastDigits is the most digits in a row JSON that go-json decodes may
// hold: every integer of 18 digits fits an int64 and a uint64, and go-json
// refuses one of 21 or more, but wraps one of 19 or 20 that overflows its
// field (9223372036854775808 into an int64 is -9223372036854775808).
const maxFastDigits = 18

// fastJSON reports whether go-json decodes raw as encoding/json does, for
// a fastDecodable type: raw is UTF-8, and holds no run of more than
// maxFastDigits digits. A run inside a string (a long numeric name) makes
// it false too, which costs only the slower decode. Any such run holds
// one of every maxFastDigits+1'th byte, so only those are read, and the
// digits around those that are digits. It costs a small part of the
// fast decode's time (BenchmarkFastJSON).
func fastJSON(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	digit := func(i int) bool { return raw[i]-'0' <= 9 }
	for i := maxFastDigits; i < len(raw); i += maxFastDigits + 1 {
		if !digit(i) {
			continue
		}
		start, end := i, i+1
		for start > 0 && digit(start-1) {
			start--
		}
		for end < len(raw) && digit(end) {
			end++
		}
		if end-start > maxFastDigits {
			return false
		}
	}
	return true
}

// FastDecodable reports whether t, and every type it holds, has no float
// and no interface, so that DecodeAs may take the fast decoder for it.
// Find it once per type: it walks the type.
func FastDecodable(t reflect.Type) bool { return fastDecodable(t, map[reflect.Type]bool{}) }

// fastDecodable reports whether t, and every type it holds, has no float
// and no interface (whose numbers are float64s), so that go-json decodes
// it as encoding/json does. seen holds the struct types already visited,
// for recursive types.
func fastDecodable(t reflect.Type, seen map[reflect.Type]bool) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Interface, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return fastDecodable(t.Elem(), seen)
	case reflect.Map:
		return fastDecodable(t.Key(), seen) && fastDecodable(t.Elem(), seen)
	case reflect.Struct:
		if seen[t] {
			return true
		}
		seen[t] = true
		for f := range t.Fields() {
			if !fastDecodable(f.Type, seen) {
				return false
			}
		}
	}
	return true
}

// Key is c's cache and work queue key: namespace/name, or name.
func (c *Object) Key() string { return key(c.GetNamespace(), c.GetName()) }

// key is the cache key of the object name in namespace: namespace/name,
// or name for a cluster-scoped object, as cache.MetaNamespaceKeyFunc makes
// it.
func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Raw is c's JSON without its managed fields, as the API server wrote it
// or encoding/json encoded it (NewObject); "" for an owned resource's
// object, whose metadata alone is kept.
func (c *Object) Raw() string { return c.raw }

// Version is an object's uid and resourceVersion: which object, and which
// of its versions.
type Version struct {
	UID             types.UID
	ResourceVersion string
}

var _ metav1.Object = (*Object)(nil)

func (c *Object) GetNamespace() string              { return c.str(c.namespace) }
func (c *Object) SetNamespace(ns string)            { c.namespace = c.spanOf(ns) }
func (c *Object) GetName() string                   { return c.str(c.name) }
func (c *Object) SetName(name string)               { c.name = c.spanOf(name) }
func (c *Object) GetGenerateName() string           { return "" }
func (c *Object) SetGenerateName(string)            {}
func (c *Object) GetUID() types.UID                 { return types.UID(c.str(c.uid)) }
func (c *Object) SetUID(uid types.UID)              { c.uid = c.spanOf(string(uid)) }
func (c *Object) GetResourceVersion() string        { return c.str(c.resourceVersion) }
func (c *Object) SetResourceVersion(rv string)      { c.resourceVersion = c.spanOf(rv) }
func (c *Object) GetGeneration() int64              { return c.generation }
func (c *Object) SetGeneration(g int64)             { c.generation = g }
func (c *Object) GetSelfLink() string               { return "" }
func (c *Object) SetSelfLink(string)                {}
func (c *Object) GetCreationTimestamp() metav1.Time { return metav1.Time{} }
func (c *Object) SetCreationTimestamp(metav1.Time)  {}
func (c *Object) GetDeletionTimestamp() *metav1.Time {
	if c.rare == nil {
		return nil
	}
	return c.rare.deletionTimestamp
}

func (c *Object) SetDeletionTimestamp(t *metav1.Time) {
	if t != nil || c.rare != nil {
		c.setRare(func(r *cachedRare) { r.deletionTimestamp = t })
	}
}

func (c *Object) GetDeletionGracePeriodSeconds() *int64 {
	return nil
}
func (c *Object) SetDeletionGracePeriodSeconds(*int64) {}
func (c *Object) GetLabels() map[string]string         { return nil }
func (c *Object) SetLabels(map[string]string)          {}
func (c *Object) GetAnnotations() map[string]string {
	if c.rare != nil && c.rare.initialEventsEnd {
		return map[string]string{initialEventsEnd: "true"}
	}
	return nil
}
func (c *Object) SetAnnotations(map[string]string) {}
func (c *Object) GetFinalizers() []string {
	if c.rare == nil {
		return nil
	}
	return c.rare.finalizerList()
}

func (c *Object) SetFinalizers(fs []string) {
	if len(fs) > 0 || c.rare != nil {
		c.setRare(func(r *cachedRare) { r.finalizers, r.nFinalizers = unsafe.SliceData(fs), uint32(len(fs)) })
	}
}

func (c *Object) GetOwnerReferences() []metav1.OwnerReference {
	if c.rare == nil {
		return nil
	}
	return c.rare.ownerReferenceList()
}

func (c *Object) SetOwnerReferences(refs []metav1.OwnerReference) {
	if len(refs) > 0 || c.rare != nil {
		c.setRare(func(r *cachedRare) { r.ownerReferences, r.nOwnerReferences = unsafe.SliceData(refs), uint32(len(refs)) })
	}
}

// setRare sets a rare field with set, and drops c.rare once it holds
// nothing.
func (c *Object) setRare(set func(*cachedRare)) {
	if c.rare == nil {
		c.rare = &cachedRare{}
	}
	set(c.rare)
	if c.rare.deletionTimestamp == nil && c.rare.nFinalizers == 0 && c.rare.nOwnerReferences == 0 && c.rare.nText == 0 && !c.rare.initialEventsEnd {
		c.rare = nil
	}
}

func (c *Object) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (c *Object) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
