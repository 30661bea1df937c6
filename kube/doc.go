// Package kube writes Kubernetes controllers as humus Services, on
// client-go's informers, work queue and leader election, with no code
// generation, no comment markers and no controller-runtime.
//
// A Controller is a humus.Service: an App's Init builds a Client and a
// Controller, and returns the Controller among its Services. The sections
// below follow a controller's life; the guide "Writing a Kubernetes
// controller", in the repository's docs, walks through a whole operator.
//
// # Resources and CRDs
//
// A custom resource is a Go value. A [Resource] names its group, version,
// kind and scope; its CRD is reflected from the Spec and Status types, and
// constrained by typed [Rules] rather than comment markers. [Resource.CRD]
// returns the CRD, or one error naming every mistake; a golden test keeps
// the installed YAML in step with the types.
//
//	var spec MemcachedSpec
//	var Memcached = kube.Resource[MemcachedSpec, MemcachedStatus]{
//		Group: "cache.example.com", Version: "v1alpha1",
//		Kind: "Memcached", Plural: "memcacheds", Scope: kube.Namespaced,
//		Rules: []kube.TypeRules{
//			kube.Rules(&spec, kube.Field(&spec.Size).Minimum(1).Maximum(5)),
//		},
//	}
//
// A built-in kind, such as corev1.Namespace, is named by a [Kind], and has
// no CRD.
//
// # Reconciling
//
// A [Reconciler] is handed an [Object], the controller's own copy of what
// its cache last saw, and returns a [Result]: the object's status, which the
// controller applies to the status subresource with server-side apply when
// it changed, and when to reconcile again. An error retries the object with
// backoff; a panic is recovered, recorded and not retried.
//
//	rec := kube.ReconcilerFunc[MemcachedSpec, MemcachedStatus](
//		func(ctx context.Context, m kube.Object[MemcachedSpec, MemcachedStatus]) (kube.Result[MemcachedStatus], error) {
//			st := m.Status
//			// ... apply what m.Spec declares, with ctx ...
//			return kube.Result[MemcachedStatus]{Status: &st}, nil
//		})
//	ctrl, err := kube.NewController(s, client, settings, Memcached, rec)
//
// [Settings] are plain values with their defaults in [DefaultSettings];
// [NewController] returns one error naming every mistake. A [Kind]'s
// objects are reconciled by a [KindReconciler], through
// [NewKindController].
//
// # Finalizers and owned resources
//
// [Finalize] keeps every object until its function has cleaned up after
// it; [Owns] reconciles an object again when a resource it controls, by an
// owner reference, changes. Both are a [Part] of the controller.
//
//	ctrl, err := kube.NewController(s, client, settings, Memcached, rec,
//		kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")),
//		kube.Finalize("cache.example.com/finalizer", cleanUp),
//	)
//
// # Leader election and shutdown
//
// Every replica keeps its caches warm; only the one that holds the Lease
// named Settings.Name reconciles. [Controller.Synced] is the readiness to
// serve, healthy on every replica once its caches have synced. A lost
// Lease ends [Controller.Serve] with [ErrLostLeadership]. On shutdown the
// controller finishes the reconciles in flight, leaves its backlog to the
// next leader and releases the Lease.
//
//	probes := health.NewProbes(s, ":8081", health.Readiness(ctrl.Synced()))
//	return []humus.Service{ctrl, probes}, nil
//
// # Connecting
//
// kube reads no environment variable, kubeconfig or token file of its own.
// A [Connection] is the API server's address, its TLS configuration and a
// function returning the bearer token, which the App's Init fills through
// the humus Host. [NewClient] builds the one transport every client-go
// client made from [Client.Config] shares.
//
//	client, err := kube.NewClient(s, kube.Connection{
//		Server: net.JoinHostPort(host, port),
//		TLS:    &tls.Config{RootCAs: roots},
//		Token:  readToken,
//	})
//
// # Telemetry
//
// Everything is recorded with the App's humus Telemetry under the scope
// github.com/z5labs/humus/kube, with no OpenTelemetry globals: a root span
// per reconcile, reconcile <Kind>; a WARN record, reconcile failed, per
// error; the work queue's and the reconciles' instruments; a client span
// per API request. client-go's own records reach the LoggerProvider through
// the logger the controller puts in their context, never klog's global
// one; Settings.ClientGoVerbosity lets its verbose records through.
//
//	humus.Main(app.Init, humus.WithTelemetry(buildTelemetry))
package kube
