// Package objcache is the controller's compact object cache and the wire
// code that fills it: what package kube's informers hold of each object,
// how it is read from the API server's JSON, and how it is decoded into a
// Reconciler's type.
//
// It owns:
//
//   - Object, a cached object: a resource's object as its JSON without
//     managed fields beside the metadata the controller reads (NewObject,
//     CompactObject), or an owned resource's as the metadata Owns reads
//     (NewMetadata, CompactMetadata). It is a metav1.Object and a
//     runtime.Object, so that client-go's informers, indexers and key
//     functions take it.
//   - Object.Decode and DecodeAs, the decode into the user's type: the
//     result encoding/json.Unmarshal gives, with the field path of a value
//     that doesn't fit, taking go-json where it agrees (FastDecodable).
//   - Client, which lists, watches and applies a resource's objects
//     through client-go's REST client with a codec and a framer of its
//     own, reading each object straight from the API server's JSON into an
//     Object (ObjectFromJSON), and each apply's answer into its Version.
//   - ChangedOnly and StatusFields, the content check that tells the
//     event of the controller's own status or finalizer apply from another
//     writer's change returned by a no-op apply: it compares two Objects'
//     JSON field by field, as bytes.
//   - CreatedMetadata, which reads the metadata of the object a write's
//     answer created, from JSON or protobuf, leaving the answer's body as
//     the client would have read it.
//
// Its invariants:
//
//   - An Object is read-only once made: every reader shares it, and its
//     decode is the caller's own copy.
//   - Equal values are equal bytes: the API server writes a custom
//     resource's JSON with sorted keys and no spaces, and NewObject writes
//     encoding/json's, so one object's fields are the same bytes whenever
//     their values are. ChangedOnly compares fields as bytes on it.
//   - The scan reads JSON as encoding/json does: an escaped key is its
//     text, a repeated key's last value wins. JSON the scan doesn't read is
//     decoded as client-go's dynamic client decodes it, never dropped.
//   - A decode agrees with encoding/json: a value go-json would read
//     otherwise (a float, an interface, a number past an int64's digits,
//     invalid UTF-8) is decoded by encoding/json. FuzzDecodeJSON and
//     FuzzCachedFromJSON hold both to it.
package objcache
