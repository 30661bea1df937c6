package objcache

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// ChangedOnly reports whether new differs from old in nothing but what
// the controller's own writes of the object may change (and the
// resourceVersion and managed fields every write moves): its finalizer,
// and the annotation named after it, unless finalizer is "" (a write
// that doesn't write the metadata); and the top-level status fields
// named in status. Another manager's finalizer, a status field not
// named, a status that isn't an object (a Kind's, say, its kubelet's),
// and anything else count as changed; so does an object whose JSON
// doesn't scan.
//
// It compares the Objects' JSON field by field, each field's value as its
// bytes, undecoded: both are the API server's encoding (ObjectFromJSON),
// or both encoding/json's (NewObject), and either writes a value always
// alike, so equal fields are equal bytes. Fields that differ only in how
// they are written count as changed; so does a status field the
// controller stopped writing (one its Status type omits when empty),
// since another writer's removal of its own field looks the same. The
// finalizers and annotations, only when they differ, are decoded to leave
// the controller's own out. Decoding both objects into maps with
// encoding/json and comparing those took 24 µs of CPU for the Memcached
// and 210 µs for a 4 KiB object; splitting their fields with go-json took
// 9-11 µs and 31-35 µs; scanning them, as the cache's reads do, took 5-6
// µs and 18-21 µs, with 16 allocations in place of 102 and 118; split by
// what the write wrote, with the status's fields scanned too, 6 µs and 18
// µs, with 19 and 20 (package kube's BenchmarkOwnWriteCheck).
func ChangedOnly(old, new *Object, finalizer string, status []string) bool {
	return ChangedOnlyMetadata(old, new, finalizer, status, nil, nil)
}

// ChangedOnlyMetadata is ChangedOnly for writes that also set the labels
// whose keys are labels and the annotations whose keys are annotations,
// as the ApplySet parent's apply does (kube's prune.go): those may differ
// too, added, changed or removed; any other label or annotation counts as
// changed.
func ChangedOnlyMetadata(old, new *Object, finalizer string, status, labels, annotations []string) bool {
	a, errA := splitWrites(old.Raw())
	b, errB := splitWrites(new.Raw())
	if errA != nil || errB != nil || !sameFields(a.fields, b.fields) || !sameFields(a.metadata, b.metadata) {
		return false
	}
	if a.labels != b.labels && !sameMapsBut(a.labels, b.labels, labels) {
		return false
	}
	if a.finalizers != b.finalizers {
		var fa, fb []string
		if finalizer == "" || json.Unmarshal([]byte(orNull(a.finalizers)), &fa) != nil || json.Unmarshal([]byte(orNull(b.finalizers)), &fb) != nil {
			return false
		}
		others := func(f string) bool { return f == finalizer }
		if !slices.Equal(slices.DeleteFunc(fa, others), slices.DeleteFunc(fb, others)) {
			return false
		}
	}
	if a.annotations != b.annotations {
		ours := annotations
		if finalizer != "" {
			ours = append(slices.Clip(ours), finalizer)
		}
		if !sameMapsBut(a.annotations, b.annotations, ours) {
			return false
		}
	}
	if a.status == b.status {
		return true
	}
	if len(status) == 0 || !a.statusObject || !b.statusObject {
		return false
	}
	others := func(f rawField) bool { return slices.Contains(status, f.key) }
	return sameFields(slices.DeleteFunc(a.statusFields, others), slices.DeleteFunc(b.statusFields, others))
}

// StatusFields returns the top-level fields of the status that apply, a
// status apply's JSON, names, as ChangedOnly takes them.
func StatusFields(apply []byte) []string {
	var names []string
	_, _ = scanFields(apply, scanSpace(apply, 0), func(f field) error {
		if !f.is("status") || apply[f.valueStart] != '{' {
			return nil
		}
		_, err := scanFields(apply, f.valueStart, func(s field) error {
			names = append(names, string(s.key))
			return nil
		})
		return err
	})
	return names
}

// sameMapsBut reports whether a and b, JSON objects of strings ("" for
// absent), hold the same entries but for the keys ours; false if ours is
// empty or either doesn't decode.
func sameMapsBut(a, b string, ours []string) bool {
	var ma, mb map[string]string
	if len(ours) == 0 || json.Unmarshal([]byte(orNull(a)), &ma) != nil || json.Unmarshal([]byte(orNull(b)), &mb) != nil {
		return false
	}
	for _, k := range ours {
		delete(ma, k)
		delete(mb, k)
	}
	return maps.Equal(ma, mb)
}

// orNull is raw, a JSON value, or null if it is absent.
func orNull(raw string) string {
	if raw == "" {
		return "null"
	}
	return raw
}

// rawField is a JSON object's field: its key as written, and its value's
// bytes.
type rawField struct{ key, value string }

// sameFields reports whether a and b hold the same fields, in any order.
func sameFields(a, b []rawField) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) {
		return true
	}
	byKey := func(x, y rawField) int { return strings.Compare(x.key, y.key) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byKey)
	slices.SortFunc(b, byKey)
	return slices.Equal(a, b)
}

// writesSplit is an object's JSON split as ChangedOnly compares it: its
// fields less its status and metadata; its metadata's fields less its
// resourceVersion, managed fields, finalizers, annotations and labels;
// those three,
// and its status, as their bytes ("" for absent); and the status's fields,
// when it is an object (or absent, as an empty one).
type writesSplit struct {
	fields, metadata        []rawField
	finalizers, annotations string
	labels                  string
	status                  string
	statusObject            bool
	statusFields            []rawField
}

// splitWrites splits the object encoded in raw as ChangedOnly compares
// it.
func splitWrites(raw string) (writesSplit, error) {
	o := writesSplit{statusObject: true}
	b := []byte(raw)
	rawOf := func(f field) rawField {
		return rawField{key: raw[f.start+1 : f.start+1+len(f.key)], value: raw[f.valueStart:f.end]}
	}
	_, err := scanFields(b, scanSpace(b, 0), func(f field) error {
		switch {
		case f.is("status"):
			o.status = raw[f.valueStart:f.end]
			o.statusObject = b[f.valueStart] == '{'
			if !o.statusObject {
				return nil
			}
			_, err := scanFields(b, f.valueStart, func(s field) error {
				o.statusFields = append(o.statusFields, rawOf(s))
				return nil
			})
			return err
		case f.is("metadata") && b[f.valueStart] == '{':
			_, err := scanFields(b, f.valueStart, func(m field) error {
				switch {
				case m.is("resourceVersion"), m.is("managedFields"):
				case m.is("finalizers"):
					o.finalizers = raw[m.valueStart:m.end]
				case m.is("annotations"):
					o.annotations = raw[m.valueStart:m.end]
				case m.is("labels"):
					o.labels = raw[m.valueStart:m.end]
				default:
					o.metadata = append(o.metadata, rawOf(m))
				}
				return nil
			})
			return err
		default:
			o.fields = append(o.fields, rawOf(f))
		}
		return nil
	})
	return o, err
}
