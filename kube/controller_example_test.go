package kube_test

import (
	"context"
	"fmt"
	"time"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Reconciler is handed its object and returns its status, which the
// Controller applies. Finalize runs in place of it once the object is being
// deleted, and Owns reconciles the object again when a Deployment it
// controls changes. Synced is the readiness the probes serve.
func ExampleNewController() {
	_ = func(ctx context.Context, s *humus.Setup, client *kube.Client) ([]humus.Service, error) {
		settings := kube.DefaultSettings()
		settings.Name = "memcached-controller"
		settings.LeaderElection.Namespace = "memcached-system" // such as POD_NAMESPACE
		settings.LeaderElection.Identity = "memcached-controller-7d9f-abcde"

		rec := kube.ReconcilerFunc[MemcachedSpec, MemcachedStatus](func(ctx context.Context, m kube.Object[MemcachedSpec, MemcachedStatus]) (kube.Result[MemcachedStatus], error) {
			st := m.Status
			// ... apply the Deployment with client-go's apply configurations ...
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{
				Type: "Available", Status: metav1.ConditionTrue, Reason: "DeploymentApplied",
				ObservedGeneration: m.Generation,
			})
			return kube.Result[MemcachedStatus]{Status: &st}, nil
		})
		ctrl, err := kube.NewController(s, client, settings, Memcached, rec,
			kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")),
			kube.Finalize("cache.example.com/finalizer", func(ctx context.Context, m kube.Object[MemcachedSpec, MemcachedStatus]) error {
				return nil // clean up what the cluster doesn't garbage collect
			}),
		)
		if err != nil {
			return nil, err
		}
		probes := health.NewProbes(s, ":8081", health.Readiness(ctrl.Synced()))
		return []humus.Service{ctrl, probes}, nil
	}
}

// A Kind names one of Kubernetes' own kinds. Its KindReconciler is handed
// client-go's struct, applies no status, and returns only when to reconcile
// again.
func ExampleNewKindController() {
	namespaces := kube.Kind[corev1.Namespace]{
		GVR:   corev1.SchemeGroupVersion.WithResource("namespaces"),
		Kind:  "Namespace",
		Scope: kube.Cluster,
	}
	_ = func(ctx context.Context, s *humus.Setup, client *kube.Client, settings kube.Settings) (*kube.Controller, error) {
		settings.Namespace = "" // a Namespace is cluster-scoped
		return kube.NewKindController(s, client, settings, namespaces,
			kube.KindReconcilerFunc[corev1.Namespace](func(ctx context.Context, ns corev1.Namespace) (time.Duration, error) {
				// ... apply a NetworkPolicy that ns controls ...
				return time.Hour, nil // and check it again within the hour
			}),
		)
	}
}

// The checks name what is wrong with one setting, for a configuration
// that reads them one at a time; NewController runs every one of them and
// returns one error naming every mistake.
func ExampleCheckName() {
	fmt.Println(kube.CheckName("memcached-controller"))
	fmt.Println(kube.CheckWorkers(0))
	// Output:
	// <nil>
	// kube: workers is 0: it must be at least 1
}
