// Command floor is the converge benchmark's floor: what the API server
// allows. It lists the Memcached objects once, then W workers apply each
// one's Deployment and its status with server-side apply: two requests an
// object, with no informer, no cache and no work queue. With -finalizer it
// first applies the object's finalizer (memcached.Finalizer), a third
// request.
//
// bench/cmd/converge starts it. Flags: -kubeconfig (required), -workers,
// -namespace, -finalizer, -cpuprofile (a CPU profile until the first "mem"
// line). It prints "done <objects>" when every object is written, and
// then waits: a line "mem" on stdin makes it print "heapinuse <bytes>
// heapalloc <bytes>" after a garbage collection; SIGTERM or SIGINT ends it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/bench/internal/memcached"
	"github.com/z5labs/humus/bench/internal/peer"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with (required)")
	workers := flag.Int("workers", 1, "how many objects are written at once")
	namespace := flag.String("namespace", "default", "the namespace of the Memcached objects")
	finalizer := flag.Bool("finalizer", false, "apply memcached.Finalizer to each object first")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile from the start until the first \"mem\" line (convergence) to this file")
	flag.Parse()
	if *kubeconfig == "" || *workers < 1 {
		fmt.Fprintln(os.Stderr, "floor: -kubeconfig is required and -workers must be at least 1")
		os.Exit(2)
	}
	stopProfile, err := peer.CPUProfile(*cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var mu sync.Mutex
	go peer.ReportMemory(os.Stdin, os.Stdout, &mu, stopProfile)
	n, err := run(ctx, *kubeconfig, *namespace, *workers, *finalizer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	mu.Lock()
	fmt.Printf("done %d\n", n)
	mu.Unlock()
	<-ctx.Done()
}

func run(ctx context.Context, kubeconfig, namespace string, workers int, finalizer bool) (int, error) {
	cfg, err := peer.RESTConfig(kubeconfig, "floor")
	if err != nil {
		return 0, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	gvr := memcached.Memcached.GVR()
	apiVersion := gvr.GroupVersion().String()
	mcs := dc.Resource(gvr).Namespace(namespace)

	var items []unstructured.Unstructured
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := mcs.List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("listing memcacheds: %w", err)
		}
		items = append(items, l.Items...)
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			break
		}
	}

	work := make(chan *unstructured.Unstructured)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				if err := write(ctx, kc, mcs, apiVersion, u, finalizer); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var firstErr error
	for i := range items {
		select {
		case work <- &items[i]:
			continue
		case err := <-errs:
			firstErr = err
		}
		break
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if firstErr == nil {
			firstErr = err
		}
	}
	return len(items), firstErr
}

// write applies u's finalizer when finalizer is set, then u's Deployment,
// then its status, as the spec's Reconciler and the kube controller would.
func write(ctx context.Context, kc kubernetes.Interface, mcs dynamic.ResourceInterface, apiVersion string, u *unstructured.Unstructured, finalizer bool) error {
	if finalizer {
		meta := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion,
			"kind":       "Memcached",
			"metadata":   map[string]any{"name": u.GetName(), "namespace": u.GetNamespace(), "finalizers": []any{memcached.Finalizer}},
		}}
		if _, err := mcs.Apply(ctx, u.GetName(), meta, metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying the finalizer of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
	}
	size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
	image, _, _ := unstructured.NestedString(u.Object, "spec", "image")
	d, err := kc.AppsV1().Deployments(u.GetNamespace()).Apply(ctx,
		memcached.Deployment(apiVersion, "Memcached", u.GetName(), u.GetNamespace(), string(u.GetUID()), int32(size), image),
		metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying deployment %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       "Memcached",
		"metadata":   map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
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
	if _, err := mcs.ApplyStatus(ctx, u.GetName(), status, metav1.ApplyOptions{FieldManager: memcached.FieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying status of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}
