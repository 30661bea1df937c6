package kube

import "github.com/z5labs/humus/kube/internal/objcache"

// cachedObject is an object as the controller's informers cache it: the
// resource's objects as their JSON without managed fields, the owned
// resources' as the metadata Owns reads (package objcache, which owns the
// cache's objects, the scan of the API server's JSON and the client that
// lists and watches through it).
type cachedObject = objcache.Object

// scannedField, scanFields and scanSpace are objcache's scan of a JSON
// object's fields, under the names the own-write content check
// (ownwrites.go) reads them by; they go once that check moves to objcache.
type scannedField struct {
	key                    []byte
	start, valueStart, end int
	f                      objcache.Field
}

// is reports whether f's key, unescaped, is key.
func (f scannedField) is(key string) bool { return f.f.Is(key) }

// scanFields is objcache.ScanFields, with each field as a scannedField.
func scanFields(b []byte, i int, f func(scannedField) error) (int, error) {
	return objcache.ScanFields(b, i, func(o objcache.Field) error {
		return f(scannedField{key: o.Key, start: o.Start, valueStart: o.ValueStart, end: o.End, f: o})
	})
}

// scanSpace is objcache.ScanSpace.
func scanSpace(b []byte, i int) int { return objcache.ScanSpace(b, i) }
