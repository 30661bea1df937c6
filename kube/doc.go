// Package kube writes Kubernetes controllers as humus Services, on
// client-go's informers, work queue and leader election, with no code
// generation, no comment markers and no controller-runtime.
//
// A custom resource is a Go value: Resource[Spec, Status] names it, and its
// CRD is reflected from the Spec and Status types and constrained by typed
// Rules. A Reconciler is handed a plain Object and returns its status, which
// the Controller applies with server-side apply. A built-in kind, such as
// corev1.Namespace, is reconciled through Kind[T] and NewKindController.
// The API server is reached through a Client that dials with the humus
// Host and records with the humus Telemetry.
package kube
