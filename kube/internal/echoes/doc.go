// Package echoes keeps the echoes of a controller's own writes from
// coming back as work: an echo is the informer's event of an object
// version the controller's own write made, its status or finalizer apply,
// or a reconcile's creation of an owned object.
//
// It owns the records of those writes and their matching against the
// informer's events (Filter, Version, Scope), and the reading of a
// reconcile's request as a write to an owned resource (OwnedWrite,
// OwnedWriteOf, OwnedKey, Written). What a write is, what an event is
// and when to queue a key are the caller's: package kube's applies and
// event handlers, and its transport's write hook.
//
// Its invariants: an event is held only while a write of its key is in
// flight, and queued once the last one ends unless it is that write's own;
// a write's version is matched at most once, and forgotten once an event
// of it or of a later version kept, or the object's deletion, comes; at
// most four versions are kept a key; nothing is kept of a key with no
// write in flight, no event held and no version awaited. A Filter's zero
// value is ready to use, and it is safe for concurrent use.
package echoes
