// Command clientgopeer is the converge benchmark's client-go peer: the
// Memcached controller an expert writes on client-go alone, in the pattern
// of k8s.io/sample-controller. A dynamic informer watches the Memcacheds and
// a typed informer the Deployments (one shared informer factory each, both
// limited to -namespace, both resynced every -resync); their handlers put
// keys in a rate-limited work queue (workqueue.DefaultTypedControllerRateLimiter),
// a Deployment's its controlling Memcached's, as sample-controller's
// handleObject does; -workers workers take keys off it, and each sync
// writes what the kube peer's Reconciler writes:
//
//   - with -finalizer, memcached.Finalizer, applied (server-side apply) when
//     the object hasn't got it, and taken off again by applying the
//     finalizer-less metadata when the object is being deleted;
//   - the Deployment (memcached.Deployment), server-side applied when the
//     cached one is missing or differs from it in replicas, image or
//     controller owner, as sample-controller updates its Deployment only
//     when its replicas differ;
//   - the status (readyReplicas and the condition Available True,
//     DeploymentApplied, observedGeneration), server-side applied to the
//     status subresource only when it differs from the cached object's.
//
// A failed sync is retried with the queue's per-key backoff, as
// sample-controller's processNextWorkItem does.
//
// bench/cmd/converge starts it. Flags: -kubeconfig (required), -workers,
// -resync, -namespace, -finalizer, -cpuprofile (a CPU profile until the
// first "mem" line). It prints "synced <seconds>" once both informers have
// synced, the seconds since it started; a line "mem" on stdin makes it print
// "heapinuse <bytes> heapalloc <bytes>" after a garbage collection; SIGTERM
// or SIGINT stop it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/bench/internal/memcached"
	"github.com/z5labs/humus/bench/internal/peer"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with (required)")
	workers := flag.Int("workers", 1, "how many keys are synced at once")
	resync := flag.Duration("resync", 10*time.Hour, "the informers' resync period")
	namespace := flag.String("namespace", "default", "the only namespace watched")
	finalizer := flag.Bool("finalizer", false, "add memcached.Finalizer to each object")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile from the start until the first \"mem\" line (convergence) to this file")
	flag.Parse()
	if *kubeconfig == "" || *workers < 1 {
		fmt.Fprintln(os.Stderr, "clientgopeer: -kubeconfig is required and -workers must be at least 1")
		os.Exit(2)
	}
	start := time.Now()
	stopProfile, err := peer.CPUProfile(*cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgopeer:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var mu sync.Mutex
	go peer.ReportMemory(os.Stdin, os.Stdout, &mu, stopProfile)
	synced := func() {
		mu.Lock()
		fmt.Printf("synced %.3f\n", time.Since(start).Seconds())
		mu.Unlock()
	}
	if err := run(ctx, *kubeconfig, *namespace, *workers, *resync, *finalizer, synced); err != nil {
		fmt.Fprintln(os.Stderr, "clientgopeer:", err)
		os.Exit(1)
	}
}

// controller is sample-controller's Controller, for Memcacheds.
type controller struct {
	kc         kubernetes.Interface
	mcs        dynamic.ResourceInterface
	mcLister   cache.GenericNamespaceLister
	depLister  appslisters.DeploymentNamespaceLister
	queue      workqueue.TypedRateLimitingInterface[string]
	apiVersion string
	finalizer  bool
}

func run(ctx context.Context, kubeconfig, namespace string, workers int, resync time.Duration, finalizer bool, synced func()) error {
	cfg, err := peer.RESTConfig(kubeconfig, "clientgopeer")
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvr := memcached.Memcached.GVR()
	kif := informers.NewSharedInformerFactoryWithOptions(kc, resync, informers.WithNamespace(namespace))
	dif := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, resync, namespace, nil)
	mcInformer := dif.ForResource(gvr)
	depInformer := kif.Apps().V1().Deployments()

	c := &controller{
		kc:         kc,
		mcs:        dc.Resource(gvr).Namespace(namespace),
		mcLister:   mcInformer.Lister().ByNamespace(namespace),
		depLister:  depInformer.Lister().Deployments(namespace),
		queue:      workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "memcacheds"}),
		apiVersion: gvr.GroupVersion().String(),
		finalizer:  finalizer,
	}
	defer c.queue.ShutDown()
	if _, err := mcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	}); err != nil {
		return err
	}
	if _, err := depInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.handleObject,
		UpdateFunc: func(old, cur any) {
			// A resync's update changes nothing: sample-controller's check.
			if old.(*appsv1.Deployment).ResourceVersion == cur.(*appsv1.Deployment).ResourceVersion {
				return
			}
			c.handleObject(cur)
		},
		DeleteFunc: c.handleObject,
	}); err != nil {
		return err
	}
	kif.Start(ctx.Done())
	dif.Start(ctx.Done())
	defer kif.Shutdown()
	defer dif.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), mcInformer.Informer().HasSynced, depInformer.Informer().HasSynced) {
		return ctx.Err()
	}
	synced()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// enqueue puts obj's namespace/name key in the queue.
func (c *controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// handleObject enqueues the Memcached that controls obj, a Deployment, if
// one does, as sample-controller's handleObject does (a tombstone's object
// too).
func (c *controller) handleObject(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.Kind != memcached.Memcached.Kind || ref.APIVersion != c.apiVersion {
		return
	}
	c.queue.Add(d.Namespace + "/" + ref.Name)
}

func (c *controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

// processNextWorkItem syncs one key: forgotten on success, put back with
// its backoff on failure.
func (c *controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.syncHandler(ctx, key); err != nil {
		c.queue.AddRateLimited(key)
		utilruntime.HandleErrorWithContext(ctx, err, "syncing", "key", key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// syncHandler brings one Memcached's finalizer, Deployment and status to
// what they should be, writing only what differs.
func (c *controller) syncHandler(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil
	}
	obj, err := c.mcLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("%s: the cache holds a %T", key, obj)
	}
	if c.finalizer {
		has := slices.Contains(u.GetFinalizers(), memcached.Finalizer)
		if u.GetDeletionTimestamp() != nil {
			if has {
				// Applying the metadata without the finalizer takes it off:
				// this field manager no longer owns it.
				return c.applyMeta(ctx, ns, name, nil)
			}
			return nil
		}
		if !has {
			if err := c.applyMeta(ctx, ns, name, []any{memcached.Finalizer}); err != nil {
				return err
			}
		}
	} else if u.GetDeletionTimestamp() != nil {
		return nil
	}

	size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
	image, _, _ := unstructured.NestedString(u.Object, "spec", "image")
	d, err := c.depLister.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if d == nil || !deploymentIsAsWanted(d, u, int32(size), image) {
		d, err = c.kc.AppsV1().Deployments(ns).Apply(ctx,
			memcached.Deployment(c.apiVersion, memcached.Memcached.Kind, name, ns, string(u.GetUID()), int32(size), image),
			metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("applying the Deployment of %s: %w", key, err)
		}
	}

	if statusIsAsWanted(u, int64(d.Status.ReadyReplicas)) {
		return nil
	}
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.apiVersion,
		"kind":       memcached.Memcached.Kind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"status": map[string]any{
			"readyReplicas": int64(d.Status.ReadyReplicas),
			"conditions": []any{map[string]any{
				"type":               "Available",
				"status":             "True",
				"reason":             "DeploymentApplied",
				"message":            "",
				"observedGeneration": u.GetGeneration(),
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		},
	}}
	if _, err := c.mcs.ApplyStatus(ctx, name, status, metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying the status of %s: %w", key, err)
	}
	return nil
}

// applyMeta applies the Memcached's metadata with finalizers (none: the
// field manager's finalizer is taken off).
func (c *controller) applyMeta(ctx context.Context, ns, name string, finalizers []any) error {
	meta := map[string]any{"name": name, "namespace": ns}
	if finalizers != nil {
		meta["finalizers"] = finalizers
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.apiVersion,
		"kind":       memcached.Memcached.Kind,
		"metadata":   meta,
	}}
	if _, err := c.mcs.Apply(ctx, name, u, metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying the finalizers of %s/%s: %w", ns, name, err)
	}
	return nil
}

// deploymentIsAsWanted is whether d, from the cache, is controlled by u and
// runs size replicas of image in its one container, as applied.
func deploymentIsAsWanted(d *appsv1.Deployment, u *unstructured.Unstructured, size int32, image string) bool {
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != u.GetUID() {
		return false
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != size {
		return false
	}
	cs := d.Spec.Template.Spec.Containers
	return len(cs) == 1 && cs[0].Name == "memcached" && cs[0].Image == image
}

// statusIsAsWanted is whether u's status already says readyReplicas and
// Available True, DeploymentApplied, at u's generation.
func statusIsAsWanted(u *unstructured.Unstructured, readyReplicas int64) bool {
	got, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	if got != readyReplicas {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Available" {
			continue
		}
		g, _ := m["observedGeneration"].(int64)
		msg, _ := m["message"].(string)
		return m["status"] == "True" && m["reason"] == "DeploymentApplied" && msg == "" && g == u.GetGeneration()
	}
	return false
}
