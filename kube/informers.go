package kube

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/objcache"
)

// The Controller's informers are client-go's dynamicinformer and
// metadatainformer (NewFilteredDynamicInformer, NewFilteredMetadataInformer),
// built here only so that their watches are detached: see detachedWatch.

// selectors are the label and field selectors an informer lists and
// watches with, in kubectl's syntax; "" selects every object.
type selectors struct{ label, field string }

// apply sets o's LabelSelector and FieldSelector to s's.
func (s selectors) setOn(o *metav1.ListOptions) {
	o.LabelSelector, o.FieldSelector = s.label, s.field
}

// newResourceInformer is dynamicinformer.NewFilteredDynamicInformer's
// informer of gvr in namespace ("" for all) of the objects sel selects
// (the zero selectors for all), with detached watches, whose cache holds each object as a
// *cachedObject with its JSON. It lists and watches through cl.cached,
// which reads the JSON straight into cachedObjects, and through
// cl.dynamic, whose unstructured objects its transform makes
// cachedObjects, when cl.cached is nil (client-go's fakes). A resync of 0
// never resyncs. Its lists and watches are recorded in h, unless h is nil.
func newResourceInformer(cl clients, h *watchHealth, gvr schema.GroupVersionResource, namespace string, sel selectors, resync time.Duration) (cache.SharedIndexInformer, error) {
	opts := cache.SharedIndexInformerOptions{ResyncPeriod: resync, ObjectDescription: gvr.String()}
	if cc := cl.cached; cc != nil {
		return newInformer(cc, h,
			func(ctx context.Context, o metav1.ListOptions) (*objcache.List, error) {
				return cc.List(ctx, gvr, namespace, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cc.Watch(ctx, gvr, namespace, o)
			},
			sel, &cachedObject{}, objcache.CompactObject, opts)
	}
	ri := cl.dynamic.Resource(gvr).Namespace(namespace)
	return newInformer(cl.dynamic, h, ri.List, ri.Watch, sel, &unstructured.Unstructured{}, objcache.CompactObject, opts)
}

// newMetadataInformer is metadatainformer.NewFilteredMetadataInformer's
// informer of gvr in namespace ("" for all) of the objects selector selects
// ("" for all), with no resync and detached watches, whose cache holds each
// object as transform returns it: compactMetadata for Owns, which keeps
// only what Owns reads. Its lists and watches are recorded in h, unless h
// is nil.
func newMetadataInformer(client metadata.Interface, h *watchHealth, gvr schema.GroupVersionResource, namespace, selector string, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	ri := client.Resource(gvr).Namespace(namespace)
	return newInformer(client, h, ri.List, ri.Watch, selectors{label: selector}, &metav1.PartialObjectMetadata{}, transform,
		cache.SharedIndexInformerOptions{ObjectDescription: gvr.String() + " metadata"})
}

// newInformer is an informer of the objects list and start list and watch,
// limited to those sel selects, with client-go's watch-list semantics
// where client supports them (cache.ToListWatcherWithWatchListSemantics),
// and detached watches, which caches each object as transform returns it.
// The outcome of each list and each watch's start is recorded in h
// (watchHealth.called), and so is each watch's stop (watchHealth.closed),
// unless h is nil.
func newInformer[L runtime.Object](client any, h *watchHealth, list func(context.Context, metav1.ListOptions) (L, error), start func(context.Context, metav1.ListOptions) (watch.Interface, error), sel selectors, obj runtime.Object, transform cache.TransformFunc, opts cache.SharedIndexInformerOptions) (cache.SharedIndexInformer, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			sel.setOn(&o)
			l, err := list(ctx, o)
			h.called(ctx, err, false)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			sel.setOn(&o)
			w, err := detachedWatch(start)(ctx, o)
			h.called(ctx, err, true)
			if err != nil || w == nil || h == nil {
				return w, err
			}
			return &stopRecords{Interface: w, stop: func() { h.closed(ctx) }}, nil
		},
	}
	// An informer made with nil Indexers panics in AddIndexers, which
	// Watches' References call: its store assigns to the nil map
	// (client-go v0.37, tools/cache/thread_safe_store.go, addIndexers).
	if opts.Indexers == nil {
		opts.Indexers = cache.Indexers{}
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), obj, opts)
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("kube: setting the transform of the informer of %s: %w", opts.ObjectDescription, err)
	}
	return inf, nil
}

// detachedWatch runs start with a context that the informer's context
// cancels only until the watch has started; from then on, the watch ends
// when the reflector stops it, as it always does when its context ends
// (tools/cache/reflector.go). The difference is in how an HTTP/2 stream
// ends: closing a response body whose request context is live waits for
// the stream to be done with (golang.org/x/net/http2, transportResponseBody.Close),
// whereas with the context already cancelled the close returns at once and
// the stream is forgotten later, so that the Client's connection, which
// Serve closes once idle as it returns, may still count it and stay open,
// with its goroutines, for the transport's idle timeout.
func detachedWatch(start func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.WatchFuncWithContext {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
		// Until the watch has started, the informer's context still
		// cancels it: a watch waiting on an unreachable server mustn't
		// hold up Serve's return.
		stop := context.AfterFunc(ctx, cancel)
		w, err := start(inner, opts)
		stop()
		if err != nil || w == nil {
			cancel()
			return w, err
		}
		return &stopCancels{Interface: w, cancel: cancel}, nil
	}
}

// stopCancels is a watch whose Stop cancels its request's context too,
// once the watch is stopped.
type stopCancels struct {
	watch.Interface
	cancel context.CancelFunc
}

func (w *stopCancels) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// stopRecords is a watch whose Stop runs stop too. client-go's reflector
// stops every watch it is done with, a broken one included (tools/cache,
// handleWatch), and may then wait out its backoff before the next list or
// watch: from the Stop until then, the informer has no watch.
type stopRecords struct {
	watch.Interface
	stop func()
}

func (w *stopRecords) Stop() {
	w.Interface.Stop()
	w.stop()
}
