package conversion

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	sigsjson "sigs.k8s.io/json"

	"github.com/z5labs/humus/kube/internal/jsondiff"
)

// PreservedAnnotation is the annotation in which a Preserving spoke keeps
// what its version cannot hold of the hub's object.
const PreservedAnnotation = "conversion.humus.z5labs.dev/preserved"

// preserved is one hub path a spoke's version lost: its value as the hub
// had it, and as the spoke's conversion back to the hub gives it (the
// base). A nil value or base is the path absent.
type preserved struct {
	// Path is object keys (strings) and, in a list with list-map keys, an
	// element named by its keys' values (an object of them). A list
	// without keys is never descended into: its path is the list's. (A
	// number, a list index, is only in annotations written before list
	// elements were named by keys, and is never restored.)
	Path  []any            `json:"path"`
	Base  *json.RawMessage `json:"base,omitempty"`
	Value *json.RawMessage `json:"value,omitempty"`
}

// PreserveOptions tune Spoke.PreservingWith. The zero value is Preserving.
type PreserveOptions struct {
	// ListMapKeys are the list-map keys of the hub's lists of objects
	// whose elements are named by keys, as the CRD's schema gives them
	// (x-kubernetes-list-type: map and x-kubernetes-list-map-keys): each
	// list's path, its JSON field names from the object's root joined by
	// dots with [] for an element of an enclosing list (spec.members,
	// spec.groups[].members), to the JSON names of its key fields (name,
	// or port and protocol). In such a list, what the spoke lost of an
	// element is kept per element, named by its keys, and restored onto
	// the element with the same keys wherever the write moved it; any
	// other list is kept whole (see Preserving). Package kube's
	// Resource.Conversion fills them from the hub's reflected schema.
	ListMapKeys map[string][]string
}

// Preserving returns sp, keeping in the spoke's objects what its version
// cannot hold of the hub's, so that a field only the hub's version has (or
// a value wider than the spoke's field) survives a read and write through
// the spoke: Cluster API's conversion-data annotation, without
// hand-written restore code, and with a three-way merge, so that stale
// preserved data does not overwrite what the write changed.
//
// From the hub to the spoke, after sp's fromHub, the spoke's object is
// converted back with sp's toHub, and every JSON path (outside apiVersion,
// kind and metadata) where that differs from the hub's object is stored in
// the spoke's PreservedAnnotation, with both values: the hub's, and the
// base, what the spoke's own fields give. No difference, no annotation.
//
// From the spoke to the hub, the annotation is removed, sp's toHub runs,
// and each stored path whose value in the result still equals its base
// (the write through the spoke did not change what the spoke's fields give
// there) gets the hub's value back; a path whose value differs keeps it:
// the write changed it, and the preserved value is stale. So a field only
// the hub has is restored, and a value the spoke's field clamps, rounds or
// cannot spell is restored unless the write changed that field.
//
// A list is kept whole unless its elements are named by keys: its path is
// the list's, its value and base the whole lists, so it is restored only
// when the write left the whole list as the spoke gave it; a write that
// removes, adds, reorders or changes any element of it loses what the
// spoke could not hold of every element, rather than move one element's
// value onto another (a list index does not prove an element is the same
// one). In a list with list-map keys, given to PreservingWith, each
// element's lost fields are kept apart, named by its keys, and restored
// onto the element with the same keys wherever the write put it. So a
// hub-only zone of members [a, b], written back through the spoke as [b],
// is restored to b when members is a list-map keyed by name, and is lost
// otherwise: lost is better than wrong.
//
// The merge is per path, where the two objects differ, not per field of
// the Go types: a hub-only field whose meaning depends on another field
// the write changed (a digest of an image whose tag the write changed) is
// restored all the same; have the spoke's toHub carry such a pair, or
// keep it in one field.
//
// Only the hub's fields are preserved: a spoke's object carries the hub's
// data, not the other way round. The hub's Go type is to hold everything
// every version can say, as Kubernetes' internal version does (its API
// conventions ask that every version round-trip through it losslessly), so
// that a field only an older version has gets a field in the hub, not an
// annotation in etcd; RoundTrip's spoke → hub → spoke direction checks
// that it does.
//
// The spoke's Go type must embed metav1.ObjectMeta (its annotations hold
// the data), and its conversions copy the metadata, as NewSpoke asks. The
// annotation counts toward the object's 256 KiB of annotations; a client
// that writes through the spoke keeps it by sending the object back as it
// read it (an update, or an apply of what it read), and a write that drops
// it loses the preserved values, as a client of the old version never
// knew them.
func (sp Spoke[H]) Preserving() Spoke[H] {
	return sp.PreservingWith(PreserveOptions{})
}

// PreservingWith is Preserving, with the list-map keys of o.ListMapKeys:
// what the spoke lost of an element of such a list is kept per element,
// named by its keys' values, and restored onto the element with the same
// keys however a write through the spoke reordered, removed or added
// elements around it (and not at all when the write removed the element,
// or changed its keys). A list's keys are used only where every element
// of the list, as the hub has it and as the spoke gives it back, has a
// scalar value for each key, no two elements share them, and both hold
// the same elements; else the list is kept whole, as Preserving keeps a
// list without keys. When the spoke gives them back in another order
// (its toHub sorts them, say), the list is kept whole too, so that a
// write that leaves it as the spoke gave it gets the hub's order back,
// and each element's lost fields are kept as well, so that a write that
// changes the list still gets them back on each element: the annotation
// then holds the list twice.
func (sp Spoke[H]) PreservingWith(o PreserveOptions) Spoke[H] {
	if !sp.made || sp.toHub == nil || sp.fromHub == nil {
		return sp // Handler and RoundTrip name the mistake
	}
	toHub, fromHub := sp.toHub, sp.fromHub
	opts := jsondiff.Options{Lists: jsondiff.Whole}
	if len(o.ListMapKeys) > 0 {
		keys := make(map[string][]string, len(o.ListMapKeys))
		for path, ks := range o.ListMapKeys {
			keys[path] = slices.Clone(ks)
		}
		opts.ListMapKeys = func(path string) []string { return keys[path] }
	}
	sp.fromHub = func(src, dst any) error {
		if err := fromHub(src, dst); err != nil {
			return err
		}
		return preserveLost(src, dst, toHub, new(H), opts)
	}
	sp.toHub = func(src, dst any) error { return toHubRestoring(src, dst, toHub) }
	return sp
}

// preserveLost stores in spoke, the spoke's object converted from hub,
// what its version lost of hub: each path where spoke, converted back
// into back (a new hub object) with toHub, differs from hub, in the
// spoke's PreservedAnnotation. No difference, no annotation.
func preserveLost(hub, spoke any, toHub convertFunc, back any, opts jsondiff.Options) error {
	acc, err := meta.Accessor(spoke)
	if err != nil {
		return fmt.Errorf("preserving: the spoke %T has no metadata: %w", spoke, err)
	}
	setAnnotation(acc, "")
	if err := toHub(spoke, back); err != nil {
		return fmt.Errorf("preserving: converting the spoke back to the hub: %w", err)
	}
	want, err := objectMap(hub)
	if err != nil {
		return err
	}
	got, err := objectMap(back)
	if err != nil {
		return err
	}
	for _, m := range []map[string]any{want, got} {
		delete(m, "apiVersion")
		delete(m, "kind")
		delete(m, "metadata")
	}
	var ps []preserved
	jsondiff.Diff(want, got, opts, func(c jsondiff.Change) {
		ps = append(ps, preserved{Path: c.Path, Base: raw(c.B, c.BOK), Value: raw(c.A, c.AOK)})
	})
	if len(ps) == 0 {
		return nil
	}
	data, err := json.Marshal(ps)
	if err != nil {
		return fmt.Errorf("preserving: %w", err)
	}
	setAnnotation(acc, string(data))
	return nil
}

// toHubRestoring converts spoke into hub with toHub, less the spoke's
// PreservedAnnotation, and restores each path it stored whose value is
// still its base.
func toHubRestoring(spoke, hub any, toHub convertFunc) error {
	acc, err := meta.Accessor(spoke)
	if err != nil {
		return fmt.Errorf("preserving: the spoke %T has no metadata: %w", spoke, err)
	}
	data, ok := acc.GetAnnotations()[PreservedAnnotation]
	if !ok {
		return toHub(spoke, hub)
	}
	setAnnotation(acc, "")
	var ps []preserved
	if err := jsondiff.Unmarshal([]byte(data), &ps); err != nil {
		return fmt.Errorf("preserving: the annotation %s is not what Preserving wrote: %w", PreservedAnnotation, err)
	}
	if err := toHub(spoke, hub); err != nil {
		return err
	}
	return restoreAll(hub, ps)
}

// restoreAll restores each of ps in hub, a hub's object, where its value
// is still its base.
func restoreAll(hub any, ps []preserved) error {
	obj, err := objectMap(hub)
	if err != nil {
		return err
	}
	restored := 0
	for _, p := range ps {
		if restore(obj, p) {
			restored++
		}
	}
	if restored == 0 {
		return nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("preserving: %w", err)
	}
	v := reflect.ValueOf(hub).Elem()
	v.SetZero()
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, hub); err != nil {
		return fmt.Errorf("preserving: restoring %s: %w", PreservedAnnotation, err)
	}
	return nil
}

// setAnnotation sets PreservedAnnotation to value on a copy of the
// object's annotations (the map may be shared with the object converted
// from), or removes it for "".
func setAnnotation(acc interface {
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}, value string) {
	a := acc.GetAnnotations()
	if _, ok := a[PreservedAnnotation]; !ok && value == "" {
		return
	}
	a = maps.Clone(a)
	if value == "" {
		delete(a, PreservedAnnotation)
		if len(a) == 0 {
			a = nil
		}
	} else {
		if a == nil {
			a = map[string]string{}
		}
		a[PreservedAnnotation] = value
	}
	acc.SetAnnotations(a)
}

// objectMap returns obj as a JSON object.
func objectMap(obj any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("preserving: encoding %T: %w", obj, err)
	}
	var m map[string]any
	if err := jsondiff.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("preserving: %T is not a JSON object: %w", obj, err)
	}
	return m, nil
}

// raw returns v as JSON, or nil when absent.
func raw(v any, ok bool) *json.RawMessage {
	if !ok {
		return nil
	}
	b, _ := json.Marshal(v) // v was decoded from JSON
	r := json.RawMessage(b)
	return &r
}

// restore sets p's path in obj to p's value, or removes it, when its value
// there equals p's base, and reports whether it did. Every parent of the
// path must be in obj (the write through the spoke removed a missing one),
// and an element of a list is found by its keys' values (a path segment
// that is an object of them), in the one element that has them;
// a list index, which can't prove the element is the one the value was
// kept from, is never followed; and a list's element is never added or
// removed.
func restore(obj map[string]any, p preserved) bool {
	if len(p.Path) == 0 {
		return false
	}
	// Diff descends only into what both the hub's object and the base
	// hold, so every parent of a stored path was in the base: one missing
	// now is one the write through the spoke removed, and the write wins.
	var parent any = obj
	for _, seg := range p.Path[:len(p.Path)-1] {
		child, ok := lookup(parent, seg)
		if !ok {
			return false
		}
		parent = child
	}
	last := p.Path[len(p.Path)-1]
	cur, ok := lookup(parent, last)
	if ok != (p.Base != nil) {
		return false
	}
	if ok {
		base, err := jsondiff.Decode(*p.Base)
		if err != nil || !jsondiff.Equal(base, cur) {
			return false
		}
	}
	var value any
	if p.Value != nil {
		v, err := jsondiff.Decode(*p.Value)
		if err != nil {
			return false
		}
		value = v
	}
	switch c := parent.(type) {
	case map[string]any:
		key, isKey := last.(string)
		if !isKey {
			return false
		}
		if p.Value == nil {
			delete(c, key)
		} else {
			c[key] = value
		}
		return true
	case []any:
		sel, isSel := last.(map[string]any)
		if !isSel || p.Value == nil || !jsondiff.Matches(value, sel) {
			return false
		}
		// As in lookup: only the one element with the keys' values.
		at := -1
		for i, e := range c {
			if jsondiff.Matches(e, sel) {
				if at >= 0 {
					return false
				}
				at = i
			}
		}
		if at < 0 {
			return false
		}
		c[at] = value
		return true
	}
	return false
}

// lookup returns the child of v at seg: a key of an object, or the one
// element of a list with the keys' values seg names.
func lookup(v, seg any) (any, bool) {
	switch c := v.(type) {
	case map[string]any:
		key, ok := seg.(string)
		if !ok {
			return nil, false
		}
		child, ok := c[key]
		return child, ok
	case []any:
		sel, ok := seg.(map[string]any)
		if !ok {
			return nil, false
		}
		found, n := any(nil), 0
		for _, e := range c {
			if jsondiff.Matches(e, sel) {
				found, n = e, n+1
			}
		}
		return found, n == 1
	}
	return nil, false
}
