// Command crpeer is the converge benchmark's controller-runtime peer: the
// kubebuilder book's Memcached controller (docs/book/src/getting-started in
// kubernetes-sigs/kubebuilder), on controller-runtime v0.25.2, with one change
// the benchmark asks for: the Deployment is applied with server-side apply
// rather than fetched, created and updated. Status is written as the book
// writes it: the conditions are set with meta.SetStatusCondition and written
// with r.Status().Update, and the object is fetched again after the first
// write.
//
// It is started by bench/cmd/converge, never by hand in CI. It is its own
// module, the only place controller-runtime is allowed, and builds with
// GOWORK=off.
//
// Flags: --kubeconfig (controller-runtime's own, as the book's main reads it),
// -workers (MaxConcurrentReconciles), -resync (the cache's SyncPeriod) and
// -namespace (the only namespace cached); -finalizer adds a finalizer as
// the operator-sdk tutorial's Memcached controller does (AddFinalizer and
// r.Update, then on deletion RemoveFinalizer and r.Update). A line "mem" on stdin makes it run
// a garbage collection and print "heapinuse <bytes> heapalloc <bytes>"; EOF on
// stdin is ignored. SIGTERM or SIGINT stops it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pkgruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// GroupVersion is the Memcached's group and version.
var GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v1alpha1"}

// MemcachedSpec is the desired state of a Memcached.
type MemcachedSpec struct {
	Size  int32  `json:"size"`
	Image string `json:"image"`
}

// MemcachedStatus is the observed state of a Memcached.
type MemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

// Memcached is one Memcached object.
type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemcachedSpec   `json:"spec"`
	Status MemcachedStatus `json:"status,omitempty"`
}

// MemcachedList is a list of Memcached objects.
type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Memcached `json:"items"`
}

// DeepCopyInto, DeepCopy and DeepCopyObject are what controller-gen would
// generate for these types.
func (in *Memcached) DeepCopyInto(out *Memcached) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = in.Spec
	out.Status = in.Status
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopy returns a deep copy of in.
func (in *Memcached) DeepCopy() *Memcached {
	if in == nil {
		return nil
	}
	out := new(Memcached)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *Memcached) DeepCopyObject() pkgruntime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *MemcachedList) DeepCopyObject() pkgruntime.Object {
	if in == nil {
		return nil
	}
	out := new(MemcachedList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Memcached, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

const typeAvailableMemcached = "Available"

// memcachedFinalizer is the benchmark's finalizer (memcached.Finalizer in
// the benchmark's module, which this one doesn't import).
const memcachedFinalizer = "cache.example.com/finalizer"

// MemcachedReconciler reconciles a Memcached object, as the book's does.
type MemcachedReconciler struct {
	client.Client
	Scheme *pkgruntime.Scheme
	// Finalizer, when set, is added to each object, as the operator-sdk
	// tutorial's controller adds its memcachedFinalizer.
	Finalizer string
}

// Reconcile is the book's Reconcile, with the Deployment applied.
func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	memcached := &Memcached{}
	if err := r.Get(ctx, req.NamespacedName, memcached); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}

	if r.Finalizer != "" {
		if !memcached.DeletionTimestamp.IsZero() {
			if controllerutil.RemoveFinalizer(memcached, r.Finalizer) {
				return ctrl.Result{}, r.Update(ctx, memcached)
			}
			return ctrl.Result{}, nil
		}
		if controllerutil.AddFinalizer(memcached, r.Finalizer) {
			if err := r.Update(ctx, memcached); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	// The book sets the status to Unknown when there is none, writes it,
	// and fetches the object again.
	if len(memcached.Status.Conditions) == 0 {
		meta.SetStatusCondition(&memcached.Status.Conditions, metav1.Condition{Type: typeAvailableMemcached, Status: metav1.ConditionUnknown, Reason: "Reconciling", Message: "Starting reconciliation"})
		if err := r.Status().Update(ctx, memcached); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Get(ctx, req.NamespacedName, memcached); err != nil {
			return ctrl.Result{}, err
		}
	}

	// In place of the book's Get, Create and Update: one server-side apply.
	labels := map[string]string{"app": "memcached", "memcached": memcached.Name}
	dep := appsv1ac.Deployment(memcached.Name, memcached.Namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(GroupVersion.String()).WithKind("Memcached").
			WithName(memcached.Name).WithUID(memcached.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(memcached.Spec.Size).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(
					corev1ac.Container().WithName("memcached").WithImage(memcached.Spec.Image)))))
	if err := r.Apply(ctx, dep, client.FieldOwner("memcached-controller"), client.ForceOwnership); err != nil {
		meta.SetStatusCondition(&memcached.Status.Conditions, metav1.Condition{Type: typeAvailableMemcached,
			Status: metav1.ConditionFalse, Reason: "Reconciling",
			Message: fmt.Sprintf("Failed to apply Deployment for the custom resource (%s): (%s)", memcached.Name, err)})
		if err := r.Status().Update(ctx, memcached); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, err
	}

	meta.SetStatusCondition(&memcached.Status.Conditions, metav1.Condition{Type: typeAvailableMemcached,
		Status: metav1.ConditionTrue, Reason: "Reconciling",
		Message: fmt.Sprintf("Deployment for custom resource (%s) with %d replicas created successfully", memcached.Name, memcached.Spec.Size)})
	if err := r.Status().Update(ctx, memcached); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// SetupWithManager sets up the controller with the Manager, as the book's
// does, with MaxConcurrentReconciles set.
func (r *MemcachedReconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&Memcached{}).
		Owns(&appsv1.Deployment{}).
		Named("memcached").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

func main() {
	workers := flag.Int("workers", 1, "MaxConcurrentReconciles")
	resync := flag.Duration("resync", 10*time.Hour, "the cache's SyncPeriod")
	namespace := flag.String("namespace", "", "the only namespace cached; empty caches every namespace")
	finalizer := flag.Bool("finalizer", false, "add the finalizer "+memcachedFinalizer+" to each object, as the operator-sdk tutorial does")
	flag.Parse()
	f := ""
	if *finalizer {
		f = memcachedFinalizer
	}
	if err := run(*workers, *resync, *namespace, f); err != nil {
		fmt.Fprintln(os.Stderr, "crpeer:", err)
		os.Exit(1)
	}
}

func run(workers int, resync time.Duration, namespace, finalizer string) error {
	// Silent, as the kube peer runs with no-op telemetry, and so that
	// controller-runtime doesn't warn that no logger was set.
	ctrl.SetLogger(logr.Discard())

	scheme := pkgruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	scheme.AddKnownTypes(GroupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.UserAgent = "crpeer"
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false, // the book's main defaults --leader-elect to false
		Cache:                  cache.Options{SyncPeriod: &resync},
	}
	if namespace != "" {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	if err := (&MemcachedReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Finalizer: finalizer}).SetupWithManager(mgr, workers); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go reportMemory(os.Stdin, os.Stdout)
	return mgr.Start(ctx)
}

// reportMemory answers each "mem" line read from in with the heap in use
// after a garbage collection, in bytes.
func reportMemory(in *os.File, out *os.File) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "mem" {
			continue
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(out, "heapinuse %d heapalloc %d\n", ms.HeapInuse, ms.HeapAlloc)
	}
}
