package app

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// FieldManager is the controller's field manager: the Settings.Name Init
// gives the Controller, so it applies the Memcached's status and finalizer,
// and the Reconciler applies the Deployment, under one name. It also names
// the Lease.
const FieldManager = "memcached-controller"

// Reconciler applies the Deployment a Memcached controls, and reports its
// ready replicas and whether they are available.
type Reconciler struct{ Kube kubernetes.Interface }

// Reconcile applies m's Deployment with server-side apply: m.Spec.Size
// replicas of m.Spec.Image, with m.Spec.Resources, run with the options of the ConfigMap that
// m.Spec.ConfigMapName names (see options), with a controller owner
// reference to m, so the Deployment is garbage collected with m and a
// change to it reconciles m again. With Sharding.CacheShare on
// (SHARDING_CACHE=share), the Deployment also carries kube.ShardLabels,
// the shard label naming this member, so that it is created in the cache
// of the member that reconciles m; otherwise it has no labels of its own.
// The returned status has the
// Deployment's ready replicas and an Available condition that is True only
// once its replicas are (see available). The first apply of each
// generation of m's spec is a Normal Event on m, DeploymentApplied, which
// kubectl describe shows; a failed reconcile is a Warning Event the
// controller records itself. When the apply fails, it returns the error and
// a status whose Available is Unknown with the error as its message, so the
// failure shows in kubectl get while the controller retries; an apply the
// API server refuses as invalid, which no retry mends, is a kube.Terminal
// error: kube reports Stalled, and reconciles m again once it changes. While
// the replicas aren't all available, the Result says Waiting, so kube
// reports Ready False and Reconciling True until they are (Memcached has
// StatusConventions).
//
// A ConfigMap that m names but that doesn't exist is no error: Reconcile
// applies nothing and reports Available False, ConfigMapNotFound, and
// Waiting, and the Controller's watch of ConfigMaps reconciles m again once
// it is created, with no retry and no After.
func (r Reconciler) Reconcile(ctx context.Context, m Object) (kube.Result[MemcachedStatus], error) {
	st := m.Status
	args, err := options(ctx, m)
	if apierrors.IsNotFound(err) {
		c := metav1.Condition{
			Type: "Available", Status: metav1.ConditionFalse, Reason: "ConfigMapNotFound",
			Message:            fmt.Sprintf("the ConfigMap %s/%s, which spec.configMapName names, doesn't exist", m.Namespace, m.Spec.ConfigMapName),
			ObservedGeneration: m.Generation,
		}
		meta.SetStatusCondition(&st.Conditions, c)
		return kube.Result[MemcachedStatus]{Status: &st, Waiting: c.Message}, nil
	}
	if err != nil {
		return kube.Result[MemcachedStatus]{}, err
	}
	labels := map[string]string{"app": "memcached", "memcached": m.Name}
	d, err := r.Kube.AppsV1().Deployments(m.Namespace).Apply(ctx,
		appsv1ac.Deployment(m.Name, m.Namespace).
			WithLabels(kube.ShardLabels(ctx)).
			WithOwnerReferences(Memcached.ControllerReference(m)).
			WithSpec(appsv1ac.DeploymentSpec().
				WithReplicas(m.Spec.Size).
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
				WithTemplate(corev1ac.PodTemplateSpec().
					WithLabels(labels).
					WithSpec(corev1ac.PodSpec().WithContainers(
						container(m, args))))),
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true},
	)
	if err != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: "Available", Status: metav1.ConditionUnknown, Reason: "ApplyFailed",
			Message: err.Error(), ObservedGeneration: m.Generation,
		})
		if apierrors.IsInvalid(err) {
			err = kube.Terminal(err)
		}
		return kube.Result[MemcachedStatus]{Status: &st}, err
	}
	if c := meta.FindStatusCondition(st.Conditions, "Available"); c == nil || c.ObservedGeneration != m.Generation {
		kube.RecorderFrom(ctx).Normal(m, "DeploymentApplied", "Apply",
			fmt.Sprintf("applied Deployment %s: %d replicas of %s", d.Name, m.Spec.Size, m.Spec.Image))
	}
	st.ReadyReplicas = d.Status.ReadyReplicas
	c := available(m, d)
	meta.SetStatusCondition(&st.Conditions, c)
	res := kube.Result[MemcachedStatus]{Status: &st}
	if c.Status != metav1.ConditionTrue {
		res.Waiting = c.Message
	}
	return res, nil
}

// container is m's memcached container, run with args, with m's
// Resources when it has them.
func container(m Object, args []string) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().WithName("memcached").WithImage(m.Spec.Image).WithArgs(args...)
	if r := m.Spec.Resources; r != nil {
		rr := corev1ac.ResourceRequirements()
		if r.Limits != nil {
			rr.WithLimits(r.Limits)
		}
		if r.Requests != nil {
			rr.WithRequests(r.Requests)
		}
		for _, cl := range r.Claims {
			claim := corev1ac.ResourceClaim().WithName(cl.Name)
			if cl.Request != "" {
				claim.WithRequest(cl.Request)
			}
			rr.WithClaims(claim)
		}
		c.WithResources(rr)
	}
	return c
}

// available is the Available condition of m, whose Deployment is d: True,
// ReplicasAvailable, once the Deployment's controller has seen its latest
// spec and m.Spec.Size of its replicas run it and are available, as
// kubectl rollout status waits for; else False, ReplicasUnavailable. Its
// message says how many are available, such as "0/2 replicas available".
// A change of the Deployment's status reconciles m again (the controller
// owns it), so the condition follows the pods with no After. On a control
// plane without a kubelet, no pod ever runs, so it stays False.
func available(m Object, d *appsv1.Deployment) metav1.Condition {
	c := metav1.Condition{
		Type: "Available", Status: metav1.ConditionFalse, Reason: "ReplicasUnavailable",
		Message:            fmt.Sprintf("%d/%d replicas available", d.Status.AvailableReplicas, m.Spec.Size),
		ObservedGeneration: m.Generation,
	}
	if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == m.Spec.Size && d.Status.AvailableReplicas == m.Spec.Size {
		c.Status, c.Reason = metav1.ConditionTrue, "ReplicasAvailable"
	}
	return c
}

// ConfigMaps is the resource of the ConfigMaps that Memcacheds name in
// their spec, which the Controller watches (New's kube.Watches) and the
// Reconciler reads from the Controller's cache.
func ConfigMaps() schema.GroupVersionResource {
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}

// options returns memcached's command-line options from the ConfigMap m
// names, "--key=value" for each of its data's keys, in the keys' order, as
// the Controller's cache holds it: reading it makes no request. A Memcached
// that names no ConfigMap has none. It returns an error for which
// apierrors.IsNotFound reports true when the ConfigMap doesn't exist, and
// kube.ListerFrom's errors.
func options(ctx context.Context, m Object) ([]string, error) {
	if m.Spec.ConfigMapName == "" {
		return nil, nil
	}
	configMaps, err := kube.ListerFrom[corev1.ConfigMap](ctx, ConfigMaps())
	if err != nil {
		return nil, err
	}
	cm, err := configMaps.Get(m.Namespace, m.Spec.ConfigMapName)
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, len(cm.Data))
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		args = append(args, "--"+k+"="+cm.Data[k])
	}
	return args, nil
}
