// Package jsondiff is the one set of rules by which kube compares two JSON
// documents: conversion.Preserving's record of what a spoke lost,
// conversion.RoundTrip's report of what came back different, and the JSON
// patch of admission's defaulting webhook all decode, compare numbers and
// pair list elements with it, so that a rule fixed here holds in all three.
//
// Its rules:
//
//   - Decode decodes every number as a json.Number, its text, never as a
//     float64, so an int64 above 2^53 (or a uint64 above 2^63) keeps every
//     digit.
//   - Equal compares numbers by their exact value (1, 1.0 and 1e0 are
//     equal; 9007199254740993 and 9007199254740992 are not), objects key
//     by key, and lists element by element in their order.
//   - Pair says which elements of two lists are the same element: in a
//     list with list-map keys (the schema's x-kubernetes-list-type: map
//     and x-kubernetes-list-map-keys), those with the same keys' values,
//     in any order, when both lists hold the same keys; in a list without,
//     those at the same index, when both lists have one length (ByIndex)
//     or the first is no longer than the second (Appended). Otherwise the
//     two lists are not paired, and are compared whole. Pairing by keys
//     never takes an element of one for a different element of the
//     other; pairing by index looks at the lengths alone, so it is right
//     only where the caller knows no element was inserted, removed or
//     moved (a list reordered, or with an element prepended, pairs too,
//     wrongly), else it uses Whole.
//   - Diff walks two documents with Equal and Pair and names each path
//     where they differ.
//
// It holds no state.
package jsondiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Decode decodes data, one JSON value, with every number a json.Number.
// Objects are map[string]any, lists []any. Data after the value is an
// error.
func Decode(data []byte) (any, error) {
	var v any
	if err := Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// Unmarshal decodes data, one JSON value, into v as encoding/json does,
// with every number held in an any a json.Number. Data after the value is
// an error.
func Unmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// Equal reports whether a and b, values as Decode gives them, are equal:
// numbers by exact value, objects by their keys, lists element by element.
// A float64 or an int is taken as the number it is, so that a value built
// in Go compares with a decoded one.
func Equal(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !Equal(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !Equal(a[i], b[i]) {
				return false
			}
		}
		return true
	case string, bool, nil:
		return a == b
	}
	ra, ok := number(a)
	if !ok {
		return false
	}
	rb, ok := number(b)
	return ok && ra.Cmp(rb) == 0
}

// number returns v's exact value, if v is a number.
func number(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case json.Number:
		return new(big.Rat).SetString(string(n))
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(n) == nil {
			return nil, false
		}
		return r, true
	case int:
		return new(big.Rat).SetInt64(int64(n)), true
	case int64:
		return new(big.Rat).SetInt64(n), true
	}
	return nil, false
}

// Lists chooses how Pair pairs the elements of a list without list-map
// keys.
type Lists int

const (
	// ByIndex pairs the elements of two lists of one length by index.
	ByIndex Lists = iota
	// Appended pairs them by index when the first list is no longer than
	// the second: a[i] with b[i] for each i below len(a), the rest of b
	// b's alone. It looks at the lengths only, taking on trust that the
	// change only appended: a list sorted or with an element prepended
	// pairs too, each a[i] with whatever element is now at b[i]. The
	// caller must prove it, as admission's defaulting patch does before
	// it pairs a list by index: each b[i] keeps every non-zero value of
	// a[i].
	Appended
	// Whole never pairs them: the lists are compared whole. Where an index
	// can't prove an element is the same one (a list written in between),
	// this is the only safe rule.
	Whole
)

// A Pairing is how the elements of two lists a and b pair: AtB[i] is the
// index in b of a[i]'s partner (every element of a has one), and b's
// elements from len(a) on, if any, are b's alone (Appended).
type Pairing struct {
	AtB []int
	// Keys are the list-map keys the elements were paired by, nil for by
	// index.
	Keys []string
}

// Pair pairs the elements of lists a and b, the same list before and after
// a change, by the list's list-map keys (nil for none) or else as lists
// says. ok is false when they can't be paired and are to be compared
// whole: with keys, when an element of either lacks a key, holds an object
// or list as a key's value, shares its keys' values with another element
// of its list, or the two lists don't hold the same keys' values; without
// keys, as Lists says, from the lengths alone: ByIndex and Appended never
// look at the elements, so an index pairing holds only where the caller
// knows no element was inserted, removed or moved.
func Pair(a, b []any, keys []string, lists Lists) (p Pairing, ok bool) {
	if len(keys) > 0 {
		if len(a) != len(b) {
			return Pairing{}, false
		}
		at := make(map[string]int, len(b))
		for j, e := range b {
			id, ok := identity(e, keys)
			if !ok {
				return Pairing{}, false
			}
			if _, dup := at[id]; dup {
				return Pairing{}, false
			}
			at[id] = j
		}
		p = Pairing{AtB: make([]int, len(a)), Keys: keys}
		seen := make(map[int]bool, len(a))
		for i, e := range a {
			id, ok := identity(e, keys)
			if !ok {
				return Pairing{}, false
			}
			j, found := at[id]
			if !found || seen[j] {
				return Pairing{}, false
			}
			seen[j] = true
			p.AtB[i] = j
		}
		return p, true
	}
	switch {
	case lists == ByIndex && len(a) == len(b), lists == Appended && len(a) <= len(b):
		p = Pairing{AtB: make([]int, len(a))}
		for i := range a {
			p.AtB[i] = i
		}
		return p, true
	}
	return Pairing{}, false
}

// Selector returns the list-map keys' values of e, an element of a list
// with keys, as an object of them: the path segment that names e in its
// list. ok is false when e isn't an object with a scalar value for every
// key.
func Selector(e any, keys []string) (map[string]any, bool) {
	m, ok := e.(map[string]any)
	if !ok {
		return nil, false
	}
	sel := make(map[string]any, len(keys))
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			return nil, false
		}
		switch v.(type) {
		case map[string]any, []any:
			return nil, false
		}
		sel[k] = v
	}
	return sel, true
}

// Matches reports whether e, an element of a list, has the keys' values
// sel names (a Selector's).
func Matches(e any, sel map[string]any) bool {
	m, ok := e.(map[string]any)
	if !ok || len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		ev, ok := m[k]
		if !ok || !Equal(ev, v) {
			return false
		}
	}
	return true
}

// identity is e's keys' values as one string, equal for two elements
// exactly when Equal holds for every key's value.
func identity(e any, keys []string) (string, bool) {
	sel, ok := Selector(e, keys)
	if !ok {
		return "", false
	}
	var b strings.Builder
	for _, k := range keys {
		switch v := sel[k].(type) {
		case string:
			b.WriteString("s" + strconv.Quote(v))
		case bool:
			b.WriteString("b" + strconv.FormatBool(v))
		case nil:
			b.WriteString("n")
		default:
			r, ok := number(v)
			if !ok {
				return "", false
			}
			b.WriteString("#" + r.RatString())
		}
		b.WriteByte(0)
	}
	return b.String(), true
}

// A Path addresses a value in a JSON document: each segment an object's
// key (a string), a list's index (an int), or an element of a list with
// list-map keys named by its keys' values (a map[string]any, a Selector).
type Path []any

// String is p as messages name it: spec.members[0].zone, or
// spec.members[name=b].zone for an element named by its keys.
func (p Path) String() string {
	var b strings.Builder
	for _, seg := range p {
		switch s := seg.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			b.WriteString("[" + strconv.Itoa(s) + "]")
		case map[string]any:
			keys := make([]string, 0, len(s))
			for k := range s {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				v, _ := json.Marshal(s[k])
				parts[i] = k + "=" + strings.Trim(string(v), `"`)
			}
			b.WriteString("[" + strings.Join(parts, ",") + "]")
		}
	}
	return b.String()
}

// Schema is the path of p's value in the schema: its keys, with "[]" for
// an element of any list, such as spec.groups[].members; the form in which
// the list-map keys are looked up.
func (p Path) Schema() string {
	var b strings.Builder
	for _, seg := range p {
		if s, ok := seg.(string); ok {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		} else {
			b.WriteString("[]")
		}
	}
	return b.String()
}

// Pointer is the JSON pointer (RFC 6901) of key k under the pointer path.
func Pointer(path, k string) string {
	return path + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// Options are how Diff walks.
type Options struct {
	// ListMapKeys returns the list-map keys of the list at the schema path
	// (Path.Schema) given, nil for a list without; nil is no list has keys.
	ListMapKeys func(schemaPath string) []string
	// Lists is how lists without keys pair: ByIndex or Whole.
	Lists Lists
	// AbsentAsEmpty compares an absent or null value with an object as an
	// empty object, so that each of the object's keys is named rather than
	// the object.
	AbsentAsEmpty bool
	// NullAsAbsent takes a null as the value absent.
	NullAsAbsent bool
}

// A Change is one path where Diff's a and b differ, with each one's value
// there; AOK or BOK false is the path absent in it.
type Change struct {
	Path     Path
	A, B     any
	AOK, BOK bool
}

// Diff calls f, in order of path (objects' keys sorted, lists' elements in
// a's order), for each path where a and b differ. It descends into two
// objects, and into two lists whose elements Pair pairs, an element named
// by its keys (a Selector) in a list with keys and by its index in a's
// list otherwise, when the pairs are in order; two lists that hold the
// same elements in another order differ as wholes, and, when paired by
// keys, also element by element (the list's change first, then each
// element's); any other difference is one change at its path, the values
// whole.
func Diff(a, b any, o Options, f func(Change)) {
	diff(nil, a, true, b, true, o, f)
}

func diff(path Path, a any, aOK bool, b any, bOK bool, o Options, f func(Change)) {
	if o.NullAsAbsent {
		aOK, bOK = aOK && a != nil, bOK && b != nil
	}
	if o.AbsentAsEmpty {
		if _, ok := a.(map[string]any); ok && (!bOK || b == nil) {
			b, bOK = map[string]any{}, true
		}
		if _, ok := b.(map[string]any); ok && (!aOK || a == nil) {
			a, aOK = map[string]any{}, true
		}
	}
	if !aOK || !bOK {
		if aOK || bOK {
			f(Change{Path: path, A: a, AOK: aOK, B: b, BOK: bOK})
		}
		return
	}
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(av)+len(bv))
			for k := range av {
				keys = append(keys, k)
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				x, xok := av[k]
				y, yok := bv[k]
				diff(append(path[:len(path):len(path)], k), x, xok, y, yok, o, f)
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			var keys []string
			if o.ListMapKeys != nil {
				keys = o.ListMapKeys(path.Schema())
			}
			// Elements paired out of order are a difference in the list's
			// order, which is the list's whole; elements paired by keys
			// are then compared one by one all the same.
			if p, ok := Pair(av, bv, keys, o.Lists); ok && (inOrder(p) || p.Keys != nil) {
				if !inOrder(p) {
					f(Change{Path: path, A: a, AOK: true, B: b, BOK: true})
				}
				for i, j := range p.AtB {
					var seg any = i
					if p.Keys != nil {
						seg, _ = Selector(av[i], p.Keys)
					}
					diff(append(path[:len(path):len(path)], seg), av[i], true, bv[j], true, o, f)
				}
				return
			}
		}
	}
	if !Equal(a, b) {
		f(Change{Path: path, A: a, AOK: true, B: b, BOK: true})
	}
}

// inOrder reports whether p pairs each element with the one at its index.
func inOrder(p Pairing) bool {
	for i, j := range p.AtB {
		if i != j {
			return false
		}
	}
	return true
}
