package conversion

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	sigsjson "sigs.k8s.io/json"
)

// PreservedAnnotation is the annotation in which a Preserving spoke keeps
// what its version cannot hold of the hub's object.
const PreservedAnnotation = "conversion.humus.z5labs.dev/preserved"

// preserved is one hub path a spoke's version lost: its value as the hub
// had it, and as the spoke's conversion back to the hub gives it (the
// base). A nil value or base is the path absent.
type preserved struct {
	Path  []any            `json:"path"` // object keys (strings) and list indices (numbers)
	Base  *json.RawMessage `json:"base,omitempty"`
	Value *json.RawMessage `json:"value,omitempty"`
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
	if !sp.made || sp.toHub == nil || sp.fromHub == nil {
		return sp // Handler and RoundTrip name the mistake
	}
	toHub, fromHub := sp.toHub, sp.fromHub
	sp.fromHub = func(src, dst any) error {
		if err := fromHub(src, dst); err != nil {
			return err
		}
		return preserveLost(src, dst, toHub, new(H))
	}
	sp.toHub = func(src, dst any) error { return toHubRestoring(src, dst, toHub) }
	return sp
}

// preserveLost stores in spoke, the spoke's object converted from hub,
// what its version lost of hub: each path where spoke, converted back
// into back (a new hub object) with toHub, differs from hub, in the
// spoke's PreservedAnnotation. No difference, no annotation.
func preserveLost(hub, spoke any, toHub convertFunc, back any) error {
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
	diffPaths(nil, want, true, got, true, &ps)
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
	if err := json.Unmarshal([]byte(data), &ps); err != nil {
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
	if err := decodeNumbers(b, &m); err != nil {
		return nil, fmt.Errorf("preserving: %T is not a JSON object: %w", obj, err)
	}
	return m, nil
}

// diffPaths appends to ps each path under path where want (the hub's) and
// got (the spoke's, converted back) differ; an ok false is the path
// absent. Objects are descended into; lists of one length too.
func diffPaths(path []any, want any, wantOK bool, got any, gotOK bool, ps *[]preserved) {
	if wantOK && gotOK {
		switch w := want.(type) {
		case map[string]any:
			if g, ok := got.(map[string]any); ok {
				keys := make([]string, 0, len(w)+len(g))
				for k := range w {
					keys = append(keys, k)
				}
				for k := range g {
					if _, ok := w[k]; !ok {
						keys = append(keys, k)
					}
				}
				sort.Strings(keys)
				for _, k := range keys {
					wv, wok := w[k]
					gv, gok := g[k]
					diffPaths(append(path[:len(path):len(path)], k), wv, wok, gv, gok, ps)
				}
				return
			}
		case []any:
			if g, ok := got.([]any); ok && len(w) == len(g) {
				for i := range w {
					diffPaths(append(path[:len(path):len(path)], i), w[i], true, g[i], true, ps)
				}
				return
			}
		}
		if reflect.DeepEqual(want, got) {
			return
		}
	} else if !wantOK && !gotOK {
		return
	}
	*ps = append(*ps, preserved{Path: path, Base: raw(got, gotOK), Value: raw(want, wantOK)})
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
// there equals p's base, and reports whether it did.
func restore(obj map[string]any, p preserved) bool {
	if len(p.Path) == 0 {
		return false
	}
	var parent any = obj
	for _, seg := range p.Path[:len(p.Path)-1] {
		child, ok := lookup(parent, seg)
		if !ok {
			if p.Base != nil {
				return false
			}
			// The base was absent, and so is its parent: make the parent
			// an object, when the path names a key in it.
			m, isMap := parent.(map[string]any)
			key, isKey := seg.(string)
			if !isMap || !isKey {
				return false
			}
			child = map[string]any{}
			m[key] = child
		}
		parent = child
	}
	last := p.Path[len(p.Path)-1]
	cur, ok := lookup(parent, last)
	if ok != (p.Base != nil) {
		return false
	}
	if ok {
		var base any
		if err := decodeNumbers(*p.Base, &base); err != nil || !reflect.DeepEqual(base, cur) {
			return false
		}
	}
	var value any
	if p.Value != nil {
		if err := decodeNumbers(*p.Value, &value); err != nil {
			return false
		}
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
		i, isIndex := index(last)
		if !isIndex || i >= len(c) || p.Value == nil {
			return false
		}
		c[i] = value
		return true
	}
	return false
}

// decodeNumbers decodes b into v, numbers as json.Number, so that an int64
// is compared and restored exactly.
func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// lookup returns the child of v at seg, a key of an object or an index of
// a list.
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
		i, ok := index(seg)
		if !ok || i >= len(c) {
			return nil, false
		}
		return c[i], true
	}
	return nil, false
}

// index returns seg as a list index: an int, or a float64 as JSON decodes
// one.
func index(seg any) (int, bool) {
	switch n := seg.(type) {
	case int:
		return n, n >= 0
	case float64:
		return int(n), n >= 0 && n == float64(int(n))
	}
	return 0, false
}
