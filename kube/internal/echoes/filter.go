package echoes

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Filter keeps the echoes of the controller's own writes, the
// informer's events of the versions they made, from coming back as work. A
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
type Filter struct {
	mu   sync.Mutex
	keys map[string]*echoesOf
}

// echoesOf is what Filter keeps of one key, while the controller
// writes it or an event of its write is still to come.
type echoesOf struct {
	inFlight int
	held     []heldEvent
	// written are the versions the controller's applies returned, oldest
	// first, whose events haven't come yet; at most maxWritten. A version
	// whose event never comes, since the watch was relisted past it, is
	// dropped by the event of a later version in written, or by the
	// object's deletion; an event of any other version leaves it. A
	// version that no event will come to match, its event having come
	// before the write's answer did, isn't kept (WroteUnless's drop).
	written []awaitedEcho
}

// awaitedEcho is one of the controller's applies: the object version it
// returned, and what it wrote.
type awaitedEcho struct {
	version Version
	scope   Scope
}

// Scope is what an apply of the controller's writes of its object,
// which the content check of its event (objcache.ChangedOnlyMetadata,
// called by the object handler in kube's serve.go) lets differ: its
// finalizer, for an apply of the metadata (the finalizer's, and the
// annotation saying why it can't run, named after it); the top-level
// fields a Resource's status apply names; and the labels and annotations
// the ApplySet parent's apply sets (kube's prune.go). Nothing else is the
// controller's: the other finalizers, labels and annotations, the other
// status fields, a Kind's whole status (a Pod's is its kubelet's), are
// another writer's.
type Scope struct {
	Finalizer   string   // "" for an apply that doesn't write the finalizer
	Status      []string // the status fields a status apply names
	Labels      []string // the keys of the labels a metadata apply sets
	Annotations []string // the keys of the annotations a metadata apply sets, beside the finalizer's
}

// union is what s and t write together.
func (s Scope) union(t Scope) Scope {
	if s.Finalizer == "" {
		s.Finalizer = t.Finalizer
	}
	s.Status = unionOf(s.Status, t.Status)
	s.Labels = unionOf(s.Labels, t.Labels)
	s.Annotations = unionOf(s.Annotations, t.Annotations)
	return s
}

// unionOf returns a with the elements of b it lacks appended, in a copy
// if any are.
func unionOf(a, b []string) []string {
	for _, f := range b {
		if !slices.Contains(a, f) {
			a = append(slices.Clip(a), f)
		}
	}
	return a
}

// maxWritten bounds echoesOf.written: a reconcile writes at most three
// times, the finalizer, the status and the ApplySet parent's metadata.
const maxWritten = 4

// Version is one version of one object.
type Version struct {
	UID             types.UID
	ResourceVersion string
}

// heldEvent is an event held while an apply is in flight, and how to queue
// its key.
type heldEvent struct {
	version  Version
	onlyOurs func(Scope) bool
	add      func(key string)
}

// Changed is an informer's add or update of key to version v, other than a
// resync: it queues key with add unless v is the controller's own write,
// or holds it while an apply of key is in flight.
func (o *Filter) Changed(key string, v Version, add func(key string)) {
	o.ChangedFrom(key, v, func(Scope) bool { return true }, add)
}

// ChangedFrom is Changed for an update whose onlyOurs reports whether it
// changed no more than what the controller's applies whose version it
// matches write (Scope). An apply that changes nothing returns the
// object as it is, at the resourceVersion of whatever change came last,
// which may be another writer's that landed while the apply was in
// flight; its version then matches the apply's, and only its content
// tells it apart.
func (o *Filter) ChangedFrom(key string, v Version, onlyOurs func(Scope) bool, add func(key string)) {
	o.mu.Lock()
	queue := o.changedLocked(key, v, onlyOurs, add)
	o.mu.Unlock()
	if queue {
		add(key)
	}
}

func (o *Filter) changedLocked(key string, v Version, onlyOurs func(Scope) bool, add func(key string)) bool {
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
func (of *echoesOf) consume(v Version) (scope Scope, ok bool) {
	if v.ResourceVersion == "" {
		return Scope{}, false
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
	return Scope{}, false
}

// Writing marks an apply of key in flight: its events are held until
// Wrote.
func (o *Filter) Writing(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = map[string]*echoesOf{}
	}
	of := o.keys[key]
	if of == nil {
		of = &echoesOf{}
		o.keys[key] = of
	}
	of.inFlight++
}

// Wrote ends the apply of key that Writing began. v is the object the
// apply returned, or nil if it returned none: the apply failed, or found
// the object gone. The events held meanwhile are queued, except the
// apply's own.
func (o *Filter) Wrote(key string, v *Version) {
	o.WroteUnless(key, v, Scope{}, nil)
}

// WroteUnless is Wrote of an apply that wrote scope, except that v is not
// kept if drop, called with the lock held once v's held event, if any,
// has been matched, reports that no event will come to match it: for a
// write whose events weren't held while it was in flight, a POST's
// (kube's ownedcreations.go), the cache holds v or a newer version of its
// object already, or the object's deletion came before the answer did.
// Kept, v would stay for the life of the process. If v's event is still on
// its way from the cache to its handler, it queues its key, and nothing
// worse.
func (o *Filter) WroteUnless(key string, v *Version, scope Scope, drop func(Version) bool) {
	o.mu.Lock()
	of := o.keys[key]
	if of == nil {
		o.mu.Unlock()
		return
	}
	of.inFlight--
	if v != nil && v.ResourceVersion != "" {
		of.written = append(of.written, awaitedEcho{version: *v, scope: scope})
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

// Deleted forgets the writes of key, whose object is gone.
func (o *Filter) Deleted(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if of := o.keys[key]; of != nil {
		of.written = nil
		o.tidy(key, of)
	}
}

// Keys is how many keys o keeps anything of: a write in flight, an event
// held, a version whose event is still to come. Nothing is kept of a key
// once its writes' events have come.
func (o *Filter) Keys() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.keys)
}

// tidy forgets key once there is nothing left to keep of it.
func (o *Filter) tidy(key string, of *echoesOf) {
	if of.inFlight == 0 && len(of.held) == 0 && len(of.written) == 0 {
		delete(o.keys, key)
	}
}

// Write runs do, an apply of key, as the controller's own write: the event
// of the object version it returns isn't queued.
func (o *Filter) Write(key string, do func() (*Version, error)) error {
	return o.WriteScoped(key, Scope{}, nil, do)
}

// WriteScoped is Write, of an apply that writes scope, for an object that
// can be deleted before the apply's answer comes, such as by the removal
// of its last finalizer: the deletion's event, which forgets the key's
// writes, can come first, the answer and the watch traveling apart. So the
// version returned isn't kept when held, asked with the lock held, reports
// that the cache holds no object of its uid any more: the informer drops
// an object from its cache before its handler hears of the deletion, so
// one that holds it then forgets the write later, in Deleted. A nil held
// keeps every version.
func (o *Filter) WriteScoped(key string, scope Scope, held func(Version) bool, do func() (*Version, error)) error {
	o.Writing(key)
	// A panic in do, which the reconcile recovers, still ends the write:
	// left in flight, the key's events would be held for good.
	defer func() {
		if p := recover(); p != nil {
			o.Wrote(key, nil)
			panic(p)
		}
	}()
	v, err := do()
	if err != nil {
		v = nil
	}
	var drop func(Version) bool
	if held != nil {
		drop = func(v Version) bool { return !held(v) }
	}
	o.WroteUnless(key, v, scope, drop)
	return err
}
