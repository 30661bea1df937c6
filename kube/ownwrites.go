package kube

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites keeps the controller's own writes from coming back as work. A
// status apply, or a finalizer's add or remove, changes the object, and the
// informer hands that change back; reconciling it again would only find
// the status it just applied. So an informer event whose object is exactly
// what one of the controller's applies returned, the same uid and
// resourceVersion, isn't queued. Any other change is, including one that
// lands between the apply and its event: it has a resourceVersion of its
// own, and the watch delivers it as an event of its own.
//
// An event can come before its apply's response does. So while an apply of
// a key is in flight, the key's events are held, and once it returns,
// those that aren't its own write are queued, as they would have been at
// once. Only the object handler's adds and updates go through here: a
// resync, a deletion, an owned resource's change, After and backoff queue
// the key as before.
//
// The zero value is ready to use.
type ownWrites struct {
	mu   sync.Mutex
	keys map[string]*ownWritesOf
}

// ownWritesOf is what ownWrites keeps of one key, while the controller
// writes it or an event of its write is still to come.
type ownWritesOf struct {
	inFlight int
	held     []heldEvent
	// written are the versions the controller's applies returned, oldest
	// first, whose events haven't come yet; at most maxWritten. A version
	// whose event never comes, since the watch was relisted past it, is
	// dropped by the event of a later version in written, or by the
	// object's deletion; an event of any other version leaves it. A
	// version whose event came before the write began isn't kept
	// (wroteCached).
	written []ownWrite
}

// ownWrite is one of the controller's applies: the object version it
// returned, and what it wrote.
type ownWrite struct {
	version objectVersion
	scope   writeScope
}

// writeScope is what an apply of the controller's writes of its object,
// which the content check of its event (onlyOwnWrites) lets differ: its
// finalizer, for an apply of the metadata (the finalizer's, and the
// annotation saying why it can't run, named after it), and the top-level
// fields a Resource's status apply names. Nothing else is the
// controller's: the other finalizers, the other status fields, a Kind's
// whole status (a Pod's is its kubelet's), are another writer's.
type writeScope struct {
	finalizer string   // "" for an apply that doesn't write the metadata
	status    []string // the status fields a status apply names
}

// union is what s and t write together.
func (s writeScope) union(t writeScope) writeScope {
	if s.finalizer == "" {
		s.finalizer = t.finalizer
	}
	for _, f := range t.status {
		if !slices.Contains(s.status, f) {
			s.status = append(s.status, f)
		}
	}
	return s
}

// maxWritten bounds ownWritesOf.written: a reconcile writes at most twice,
// the finalizer and the status.
const maxWritten = 4

// objectVersion is one version of one object.
type objectVersion struct {
	uid             types.UID
	resourceVersion string
}

// heldEvent is an event held while an apply is in flight, and how to queue
// its key.
type heldEvent struct {
	version  objectVersion
	onlyOurs func(writeScope) bool
	add      func(key string)
}

// changed is an informer's add or update of key to version v, other than a
// resync: it queues key with add unless v is the controller's own write,
// or holds it while an apply of key is in flight.
func (o *ownWrites) changed(key string, v objectVersion, add func(key string)) {
	o.changedFrom(key, v, func(writeScope) bool { return true }, add)
}

// changedFrom is changed for an update whose onlyOurs reports whether it
// changed no more than what the controller's applies whose version it
// matches write (writeScope). An apply that changes nothing returns the
// object as it is, at the resourceVersion of whatever change came last,
// which may be another writer's that landed while the apply was in
// flight; its version then matches the apply's, and only its content
// tells it apart.
func (o *ownWrites) changedFrom(key string, v objectVersion, onlyOurs func(writeScope) bool, add func(key string)) {
	o.mu.Lock()
	queue := o.changedLocked(key, v, onlyOurs, add)
	o.mu.Unlock()
	if queue {
		add(key)
	}
}

func (o *ownWrites) changedLocked(key string, v objectVersion, onlyOurs func(writeScope) bool, add func(key string)) bool {
	of := o.keys[key]
	if of == nil {
		return true
	}
	if scope, ok := of.consume(v); ok {
		o.tidy(key, of)
		return !onlyOurs(scope)
	}
	if of.inFlight > 0 {
		of.held = append(of.held, heldEvent{version: v, onlyOurs: onlyOurs, add: add})
		return false
	}
	return true
}

// consume reports whether v is one of the controller's writes, and forgets
// it and the writes before it, whose events the watch has passed: an event
// can span them all, after a relist, so scope is what they wrote together.
func (of *ownWritesOf) consume(v objectVersion) (scope writeScope, ok bool) {
	if v.resourceVersion == "" {
		return writeScope{}, false
	}
	for i, w := range of.written {
		if w.version == v {
			for _, before := range of.written[:i+1] {
				scope = scope.union(before.scope)
			}
			of.written = of.written[i+1:]
			return scope, true
		}
	}
	return writeScope{}, false
}

// writing marks an apply of key in flight: its events are held until
// wrote.
func (o *ownWrites) writing(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = map[string]*ownWritesOf{}
	}
	of := o.keys[key]
	if of == nil {
		of = &ownWritesOf{}
		o.keys[key] = of
	}
	of.inFlight++
}

// wrote ends the apply of key that writing began. v is the object the
// apply returned, or nil if it returned none: the apply failed, or found
// the object gone. The events held meanwhile are queued, except the
// apply's own.
func (o *ownWrites) wrote(key string, v *objectVersion) {
	o.wroteUnless(key, v, writeScope{}, nil)
}

// wroteCached is wrote for a write whose events weren't held while it
// was in flight, a POST's (ownedwrites.go), cached reporting whether the
// informer's cache holds v, or a newer version of its object, already:
// then v's event has most often come and queued its key before the answer
// did, and v is not kept, since no event would come to forget it: kept,
// it stayed until the object's deletion. If v's event is still on its way from the cache to its
// handler, it queues its key, and nothing worse.
func (o *ownWrites) wroteCached(key string, v *objectVersion, cached bool) {
	o.wroteUnless(key, v, writeScope{}, func(objectVersion) bool { return cached })
}

// wroteUnless is wrote of an apply that wrote scope, except that v is not
// kept if drop, called with the lock held once v's held event, if any,
// has been matched, reports that no event will come to match it.
func (o *ownWrites) wroteUnless(key string, v *objectVersion, scope writeScope, drop func(objectVersion) bool) {
	o.mu.Lock()
	of := o.keys[key]
	if of == nil {
		o.mu.Unlock()
		return
	}
	of.inFlight--
	if v != nil && v.resourceVersion != "" {
		of.written = append(of.written, ownWrite{version: *v, scope: scope})
		if len(of.written) > maxWritten {
			of.written = of.written[len(of.written)-maxWritten:]
		}
	}
	var release []heldEvent
	if of.inFlight == 0 {
		for _, h := range of.held {
			if scope, ok := of.consume(h.version); !ok || !h.onlyOurs(scope) {
				release = append(release, h)
			}
		}
		of.held = nil
	}
	if v != nil && len(of.written) > 0 && of.written[len(of.written)-1].version == *v && drop != nil && drop(*v) {
		of.written = of.written[:len(of.written)-1]
	}
	o.tidy(key, of)
	o.mu.Unlock()
	for _, h := range release {
		h.add(key)
	}
}

// deleted forgets the writes of key, whose object is gone.
func (o *ownWrites) deleted(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if of := o.keys[key]; of != nil {
		of.written = nil
		o.tidy(key, of)
	}
}

// tidy forgets key once there is nothing left to keep of it.
func (o *ownWrites) tidy(key string, of *ownWritesOf) {
	if of.inFlight == 0 && len(of.held) == 0 && len(of.written) == 0 {
		delete(o.keys, key)
	}
}

// apply runs do, an apply of key, as the controller's own write: the event
// of the object version it returns isn't queued.
func (o *ownWrites) apply(key string, do func() (*objectVersion, error)) error {
	return o.applyHeld(key, writeScope{}, nil, do)
}

// applyHeld is apply, of an apply that writes scope, for an object that can be deleted before the apply's
// answer comes, such as by the removal of its last finalizer: the
// deletion's event, which forgets the key's writes, can come first, the
// answer and the watch traveling apart. So the version returned isn't
// kept when held, asked with the lock held, reports that the cache holds
// no object of its uid any more: the informer drops an object from its
// cache before its handler hears of the deletion, so one that holds it
// then forgets the write later, in deleted. A nil held keeps every version.
func (o *ownWrites) applyHeld(key string, scope writeScope, held func(objectVersion) bool, do func() (*objectVersion, error)) error {
	o.writing(key)
	// A panic in do, which the reconcile recovers, still ends the write:
	// left in flight, the key's events would be held for good.
	defer func() {
		if p := recover(); p != nil {
			o.wrote(key, nil)
			panic(p)
		}
	}()
	v, err := do()
	if err != nil {
		v = nil
	}
	var drop func(objectVersion) bool
	if held != nil {
		drop = func(v objectVersion) bool { return !held(v) }
	}
	o.wroteUnless(key, v, scope, drop)
	return err
}

// onlyOwnWrites reports whether new differs from old in nothing but what
// the controller's applies of scope write (and the resourceVersion and
// managed fields every write moves): its own finalizer, and the
// annotation named after it, if scope writes the metadata; the status
// fields scope names. Another manager's finalizer, a status field the
// apply didn't name, a Kind's status (its kubelet's, say), and anything
// else count as changed. It is asked only of an event whose version
// matches one of the controller's writes; an object it can't read counts
// as changed.
//
// It compares the cached JSON field by field, each field's value as its
// bytes, undecoded: both are the API server's encoding (package objcache), or
// both encoding/json's (newCachedObject), and either writes a value always
// alike, so equal fields are equal bytes. Fields that differ only in how
// they are written count as changed, which queues the key once more and
// nothing worse; so does a status field the controller stopped writing
// (one its Status type omits when empty), since another writer's removal
// of its own field looks the same. The finalizers and annotations, only
// when they differ, are decoded to leave the controller's own out.
// Decoding both objects into maps with encoding/json and comparing those
// took 24 µs of CPU for the Memcached and 210 µs for a 4 KiB object;
// splitting their fields with go-json took 9-11 µs and 31-35 µs; scanning
// them, as the cache's reads do, took 5-6 µs and 18-21 µs, with 16
// allocations in place of 102 and 118; split by what the apply wrote,
// with the status's fields scanned too, 6 µs and 18 µs, with 19 and 20
// (BenchmarkOwnWriteCheck).
func onlyOwnWrites(old, new *cachedObject, scope writeScope) bool {
	a, errA := withoutOwnWrites(old.Raw())
	b, errB := withoutOwnWrites(new.Raw())
	if errA != nil || errB != nil || !sameFields(a.fields, b.fields) || !sameFields(a.metadata, b.metadata) {
		return false
	}
	if a.finalizers != b.finalizers {
		var fa, fb []string
		if scope.finalizer == "" || json.Unmarshal([]byte(orNull(a.finalizers)), &fa) != nil || json.Unmarshal([]byte(orNull(b.finalizers)), &fb) != nil {
			return false
		}
		others := func(f string) bool { return f == scope.finalizer }
		if !slices.Equal(slices.DeleteFunc(fa, others), slices.DeleteFunc(fb, others)) {
			return false
		}
	}
	if a.annotations != b.annotations {
		var aa, ab map[string]string
		if scope.finalizer == "" || json.Unmarshal([]byte(orNull(a.annotations)), &aa) != nil || json.Unmarshal([]byte(orNull(b.annotations)), &ab) != nil {
			return false
		}
		delete(aa, scope.finalizer)
		delete(ab, scope.finalizer)
		if !maps.Equal(aa, ab) {
			return false
		}
	}
	if a.status == b.status {
		return true
	}
	if len(scope.status) == 0 || !a.statusObject || !b.statusObject {
		return false
	}
	others := func(f rawField) bool { return slices.Contains(scope.status, f.key) }
	return sameFields(slices.DeleteFunc(a.statusFields, others), slices.DeleteFunc(b.statusFields, others))
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

// ownWritesSplit is an object's JSON split as onlyOwnWrites compares it:
// its fields less its status and metadata; its metadata's fields less its
// resourceVersion, managed fields, finalizers and annotations; those two,
// and its status, as their bytes ("" for absent); and the status's fields,
// when it is an object (or absent, as an empty one).
type ownWritesSplit struct {
	fields, metadata        []rawField
	finalizers, annotations string
	status                  string
	statusObject            bool
	statusFields            []rawField
}

// withoutOwnWrites splits the object encoded in raw as onlyOwnWrites
// compares it.
func withoutOwnWrites(raw string) (ownWritesSplit, error) {
	o := ownWritesSplit{statusObject: true}
	b := []byte(raw)
	field := func(f scannedField) rawField {
		return rawField{key: raw[f.start+1 : f.start+1+len(f.key)], value: raw[f.valueStart:f.end]}
	}
	_, err := scanFields(b, scanSpace(b, 0), func(f scannedField) error {
		switch {
		case f.is("status"):
			o.status = raw[f.valueStart:f.end]
			o.statusObject = b[f.valueStart] == '{'
			if !o.statusObject {
				return nil
			}
			_, err := scanFields(b, f.valueStart, func(s scannedField) error {
				o.statusFields = append(o.statusFields, field(s))
				return nil
			})
			return err
		case f.is("metadata") && b[f.valueStart] == '{':
			_, err := scanFields(b, f.valueStart, func(m scannedField) error {
				switch {
				case m.is("resourceVersion"), m.is("managedFields"):
				case m.is("finalizers"):
					o.finalizers = raw[m.valueStart:m.end]
				case m.is("annotations"):
					o.annotations = raw[m.valueStart:m.end]
				default:
					o.metadata = append(o.metadata, field(m))
				}
				return nil
			})
			return err
		default:
			o.fields = append(o.fields, field(f))
		}
		return nil
	})
	return o, err
}

// statusFieldsOf returns the top-level fields of the status that apply, a
// status apply's JSON, names: what a Resource's status apply writes.
func statusFieldsOf(apply []byte) []string {
	var names []string
	_, _ = scanFields(apply, scanSpace(apply, 0), func(f scannedField) error {
		if !f.is("status") || apply[f.valueStart] != '{' {
			return nil
		}
		_, err := scanFields(apply, f.valueStart, func(s scannedField) error {
			names = append(names, string(s.key))
			return nil
		})
		return err
	})
	return names
}
