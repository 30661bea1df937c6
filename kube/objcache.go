package kube

import "github.com/z5labs/humus/kube/internal/objcache"

// cachedObject is an object as the controller's informers cache it: the
// resource's objects as their JSON without managed fields, the owned
// resources' as the metadata Owns reads (package objcache, which owns the
// cache's objects, the scan of the API server's JSON and the client that
// lists and watches through it).
type cachedObject = objcache.Object
