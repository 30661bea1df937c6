//go:build controlplane

package app_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

const (
	crdFile       = "../deploy/crds/memcacheds.cache.example.com.yaml"
	crdName       = "memcacheds.cache.example.com"
	reconcileSpan = "reconcile Memcached"
)

// TestMemcachedApp runs the whole Memcached App, as humus.Main would, on
// humus.OSHost() against a real local control plane (or the cluster
// HUMUS_TEST_KUBECONFIG names), and checks each claim the spec makes of it.
// Every subtest has namespaces of its own, for its Memcacheds and its
// Lease, and deletes its Memcacheds while an App still runs to finalize
// them.
func TestMemcachedApp(t *testing.T) {
	// OwnerReferencesPermissionEnforcement, which OpenShift turns on, is
	// the strictest API server the deploy RBAC meets: the subtests with a
	// ServiceAccount's token show the RBAC holds under it.
	e := apptest.NewEnv(t, controlplanetest.Start(t,
		controlplanetest.WithAPIServerFlags("--enable-admission-plugins="+ownerRefsPlugin)))

	// Before the CRD is installed.
	t.Run("MissingCRDEndsTheAppWithExit1NamingTheResource", func(t *testing.T) {
		if _, err := e.Dynamic.Resource(controlplanetest.CRDGVR).Get(t.Context(), crdName, metav1.GetOptions{}); err == nil {
			t.Skip("the cluster already has the Memcached CRD")
		}
		ns := e.Namespace(t, "missing-crd")
		a := apptest.Start(t, app.New(config(t, e, ns, "replica-0")), humus.OSHost())
		require.Equal(t, 1, a.WaitExit(t, 30*time.Second))
		require.Contains(t, a.Stderr(), "cache.example.com/v1beta1, Resource=memcacheds")
	})

	e.InstallCRD(t, crdFile, crdName)

	t.Run("ReconcilesAMemcachedThroughItsLifecycle", func(t *testing.T) {
		ns := e.Namespace(t, "lifecycle")
		tel := apptest.NewTelemetry(t)
		a := apptest.Start(t, app.New(config(t, e, ns, "replica-0")), humus.OSHost(), humus.WithTelemetry(tel.Build))
		testLifecycle(t, e, ns, tel)
		t.Run("SIGTERMExits0AndTheLeaseHasNoHolder", func(t *testing.T) {
			require.Equal(t, 0, a.Terminate(t))
			e.RequireNoHolder(t, ns, app.FieldManager)
		})
	})

	t.Run("LeavesNoGoroutineBehind", func(t *testing.T) {
		testNoGoroutineLeft(t, e)
	})

	t.Run("InitReadsAKubeconfigAndServesReadiness", func(t *testing.T) {
		ns := e.Namespace(t, "kubeconfig")
		probes := controlplanetest.FreeAddr(t)
		host := humus.OSHost()
		host.LookupEnv = apptest.LookupEnv(map[string]string{
			appconfig.EnvKubeconfig:   abs(t, e.Cluster.Kubeconfig),
			appconfig.EnvPodNamespace: ns,
			appconfig.EnvPodName:      "laptop",
			appconfig.EnvWatchNS:      ns,
			appconfig.EnvProbesAddr:   probes,
		})
		a := apptest.Start(t, app.Init, host)
		controlplanetest.Ready(t, probes)
		memcacheds := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
		createMemcached(t, memcacheds, "cache", 1)
		waitDeployment(t, e.Kube, ns, "cache")
		deleteMemcached(t, memcacheds, "cache")
		require.Equal(t, 0, a.Terminate(t))
	})

	t.Run("TheBinaryWritesNothingToItsRealStderrButItsRecords", func(t *testing.T) {
		testBinaryStderr(t, e)
	})

	t.Run("ExportsMetricsOnLoopbackAndTracesOverOTLP", func(t *testing.T) {
		testExportsMetricsAndTraces(t, e)
	})

	t.Run("MetricsOverTLSLetInOnlyWhomTheAPIServerAuthorizes", func(t *testing.T) {
		testMetricsAuth(t, e)
	})

	t.Run("InitWithoutItsEnvironmentNamesEveryMissingVariable", func(t *testing.T) {
		host := humus.OSHost()
		host.LookupEnv = apptest.LookupEnv(nil)
		a := apptest.Start(t, app.Init, host)
		require.Equal(t, 1, a.WaitExit(t, 30*time.Second))
		for _, v := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "POD_NAME"} {
			require.Contains(t, a.Stderr(), v)
		}
	})

	t.Run("RunsInAPodWithExactlyTheDeployRBAC", func(t *testing.T) {
		// Every deploy file is accepted, with strict field validation; the
		// Deployment's pods never run, with no kubelet.
		for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "deployment.yaml"} {
			e.Apply(t, "../deploy/"+f)
		}
		ns := e.Namespace(t, "rbac")
		probes := controlplanetest.FreeAddr(t)
		host := e.Pod(t, "memcached-system", "memcached-controller", "memcached-controller-0", apptest.PodEnv(map[string]string{
			appconfig.EnvProbesAddr: probes,
		}))

		// The token is the ServiceAccount's, which the deploy RBAC binds
		// and nothing else does.
		token, err := fs.ReadFile(host.FS, appconfig.ServiceAccountDir+"token")
		require.NoError(t, err)
		sa := e.WithToken(t, string(token))
		controlplanetest.WaitAllowed(t, sa,
			func(ctx context.Context, kc kubernetes.Interface) error {
				_, err := kc.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1})
				return err
			},
			func(ctx context.Context, kc kubernetes.Interface) error {
				_, err := kc.CoordinationV1().Leases("memcached-system").Get(ctx, app.FieldManager, metav1.GetOptions{})
				return err
			},
			func(ctx context.Context, kc kubernetes.Interface) error {
				_, err := kc.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
				return err
			})
		_, err = sa.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "listing secrets with the ServiceAccount's token: %v", err)

		tel := apptest.NewTelemetry(t)
		a := apptest.Start(t, app.Init, host, humus.WithTelemetry(tel.Build))
		controlplanetest.Ready(t, probes)
		testLifecycle(t, e, ns, tel)
		require.Equal(t, 0, a.Terminate(t))
		e.RequireNoHolder(t, "memcached-system", app.FieldManager)
	})

	t.Run("OneRuleLessIsNamed", func(t *testing.T) {
		testOneRuleLess(t, e)
	})

	t.Run("TheFinalizersRuleIsWhatLetsTheDeploymentBlockItsOwnersDeletion", func(t *testing.T) {
		if controlplanetest.External() {
			t.Skip("needs the " + ownerRefsPlugin + " admission plugin, which only the local control plane is known to run")
		}
		testFinalizersRule(t, e)
	})

	t.Run("TwoReplicasOnlyTheHolderReconcilesAndTheOtherTakesOverOnSIGTERM", func(t *testing.T) {
		ns := e.Namespace(t, "replicas")
		tel0, tel1 := apptest.NewTelemetry(t), apptest.NewTelemetry(t)
		cfg0, cfg1 := config(t, e, ns, "replica-0"), config(t, e, ns, "replica-1")
		leaseDuration := cfg1.Settings.LeaderElection.LeaseDuration

		a0 := apptest.Start(t, app.New(cfg0), humus.OSHost(), humus.WithTelemetry(tel0.Build))
		e.WaitHolder(t, 30*time.Second, ns, app.FieldManager, "replica-0")
		a1 := apptest.Start(t, app.New(cfg1), humus.OSHost(), humus.WithTelemetry(tel1.Build))
		// The standby's caches are warm: it is ready too.
		controlplanetest.Ready(t, cfg1.ProbesAddr)

		memcacheds := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
		createMemcached(t, memcacheds, "cache", 2)
		waitReconciled(t, memcacheds, "cache")
		// The reconcile's span ends after its status apply returns, so
		// just after the status is seen: wait for it.
		controlplanetest.Eventually(t, 10*time.Second, "the holder's reconcile span", func(context.Context) (bool, error) {
			return apptest.CountSpans(tel0, reconcileSpan) > 0, nil
		})
		require.Zero(t, apptest.CountSpans(tel1, reconcileSpan), "the standby's reconciles")

		start := time.Now()
		require.Equal(t, 0, a0.Terminate(t))
		// replica-0 released the Lease before it exited: it no longer
		// holds it, so replica-1 need not wait out LeaseDuration.
		holder, err := e.Holder(t.Context(), ns, app.FieldManager)
		require.NoError(t, err)
		require.NotEqual(t, "replica-0", holder, "the Lease's holder once replica-0 exited 0")
		e.WaitHolder(t, leaseDuration, ns, app.FieldManager, "replica-1")
		t.Logf("replica-1 took the Lease %v after replica-0's SIGTERM (LeaseDuration %v)", time.Since(start).Round(time.Millisecond), leaseDuration)
		// The scale's second starts once replica-1 leads: after it read
		// its acquiring write's answer and its caches caught up.
		waitLeading(t, tel1)

		scaleAndWaitUndone(t, e.Kube.AppsV1().Deployments(ns), "cache", 2)
		controlplanetest.Eventually(t, 10*time.Second, "the new holder's reconcile span", func(context.Context) (bool, error) {
			return apptest.CountSpans(tel1, reconcileSpan) > 0, nil
		})
		deleteMemcached(t, memcacheds, "cache")
		require.Equal(t, 0, a1.Terminate(t))
	})

	t.Run("AnUnreachableAPIServerBeyondRenewDeadlineEndsTheAppWithExit1", func(t *testing.T) {
		ns := e.Namespace(t, "unreachable")
		cfg := config(t, e, ns, "replica-0")
		cfg.Settings.LeaderElection.LeaseDuration = 4 * time.Second
		cfg.Settings.LeaderElection.RenewDeadline = 3 * time.Second
		cfg.Settings.LeaderElection.RetryPeriod = 500 * time.Millisecond
		dial := &apptest.CuttableDial{}
		host := humus.OSHost()
		host.Dial = dial.Dial
		tel := apptest.NewTelemetry(t)
		a := apptest.Start(t, app.New(cfg), host, humus.WithTelemetry(tel.Build))
		// Cut once the App leads, not once the Lease names it: a cut
		// between the API server storing the App's acquiring write and the
		// App reading the answer leaves it a candidate, which retries, as
		// client-go's, and rightly never exits (seen once in CI).
		waitLeading(t, tel)

		dial.Cut()
		start := time.Now()
		require.Equal(t, 1, a.WaitExit(t, 30*time.Second))
		t.Logf("the App exited %v after the API server became unreachable (RenewDeadline %v)", time.Since(start).Round(time.Millisecond), cfg.Settings.LeaderElection.RenewDeadline)
		require.Contains(t, a.Stderr(), "kube: lost the lease")
	})
}

// testNoGoroutineLeft runs the App through a Memcached's lifecycle, and
// checks that once it has exited 0 no goroutine it started is left
// (go.uber.org/goleak). The test's own requests go through a Client of
// their own, whose idle connections it closes before the check.
func testNoGoroutineLeft(t *testing.T, e apptest.Env) {
	ns := e.Namespace(t, "leaks")
	client, err := kube.NewClient(&humus.Setup{Host: humus.OSHost()}, e.Connection())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(client.Config())
	require.NoError(t, err)
	ignore := goleak.IgnoreCurrent()

	a := apptest.Start(t, app.New(config(t, e, ns, "replica-0")), humus.OSHost())
	memcacheds := dyn.Resource(app.Memcached.GVR()).Namespace(ns)
	createMemcached(t, memcacheds, "cache", 1)
	waitReconciled(t, memcacheds, "cache")
	deleteMemcached(t, memcacheds, "cache")
	require.Equal(t, 0, a.Terminate(t))
	client.CloseIdleConnections()
	require.NoError(t, goleak.Find(ignore))
}

// testBinaryStderr builds the Memcached command and runs it as a process
// of its own, as a pod does, through a Memcached's lifecycle, and checks
// that every line it writes to its real stderr is a record of its
// telemetry, or the App's own line on SIGTERM: client-go's records, the
// informers', the work queue's and leader election's, "Successfully
// acquired lease" among them, arrive as records, and none as klog's text.
func testBinaryStderr(t *testing.T, e apptest.Env) {
	ns := e.Namespace(t, "binary")
	bin := apptest.Build(t, "github.com/z5labs/humus/kube/examples/memcached/cmd/memcached")
	p := apptest.StartProcess(t, bin, map[string]string{
		appconfig.EnvKubeconfig:   abs(t, e.Cluster.Kubeconfig),
		appconfig.EnvPodNamespace: ns,
		appconfig.EnvPodName:      "replica-0",
		appconfig.EnvWatchNS:      ns,
		appconfig.EnvProbesAddr:   controlplanetest.FreeAddr(t),
	})
	e.WaitHolder(t, 30*time.Second, ns, app.FieldManager, "replica-0")
	memcacheds := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	createMemcached(t, memcacheds, "cache", 1)
	waitDeployment(t, e.Kube, ns, "cache")
	deleteMemcached(t, memcacheds, "cache")
	require.Equal(t, 0, p.Terminate(t))

	records, other := apptest.Lines(p.Stderr())
	require.Equal(t, []string{"humus: received terminated, stopping"}, other, "the lines of stderr that aren't records")
	require.Empty(t, p.Stdout())
	var acquired []apptest.Record
	for _, r := range records {
		if r.Body.Value == "Successfully acquired lease" {
			acquired = append(acquired, r)
		}
	}
	require.Len(t, acquired, 1, "records: %v", apptest.Bodies(records))
	require.Equal(t, "github.com/z5labs/humus/kube", acquired[0].Scope.Name)
	require.Contains(t, apptest.Bodies(records), "memcached finalized")
}

// ownerRefsPlugin is the admission plugin that lets only a user who may
// update an owner's finalizers set blockOwnerDeletion on a reference to it
// (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#ownerreferencespermissionenforcement).
const ownerRefsPlugin = "OwnerReferencesPermissionEnforcement"

// testFinalizersRule shows, on an API server with ownerRefsPlugin, that
// the deploy RBAC's memcacheds/finalizers rule is needed: without it, the
// Reconciler's apply of a Deployment owned by a Memcached is refused, and
// with it alone added, the same apply is allowed.
func testFinalizersRule(t *testing.T, e apptest.Env) {
	ctx := t.Context()
	ns := e.Namespace(t, "finalizers")
	kc := e.Kube
	_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "applier"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	bind := func(name string, rule rbacv1.PolicyRule) {
		t.Helper()
		_, err := kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "applier", Namespace: ns}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The deploy RBAC's rule on Deployments, without the finalizers rule.
	bind("deployments", rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list", "watch", "create", "patch"}})
	token, err := e.Cluster.ServiceAccountToken(ctx, ns, "applier")
	require.NoError(t, err)
	sa := e.WithToken(t, token)

	owner := createMemcached(t, e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns), "owner", 1)
	apply := func(ctx context.Context, kc kubernetes.Interface) error {
		labels := map[string]string{"app": "owner"}
		d := appsv1ac.Deployment("owner", ns).
			WithOwnerReferences(metav1ac.OwnerReference().
				WithAPIVersion(owner.GetAPIVersion()).WithKind(owner.GetKind()).
				WithName(owner.GetName()).WithUID(owner.GetUID()).
				WithController(true).WithBlockOwnerDeletion(true)).
			WithSpec(appsv1ac.DeploymentSpec().
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
				WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).
					WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("memcached").WithImage("memcached:1.6")))))
		_, err := kc.AppsV1().Deployments(ns).Apply(ctx, d, metav1.ApplyOptions{FieldManager: app.FieldManager, Force: true})
		return err
	}
	// Wait until the rule on Deployments has taken effect: the refusal
	// then is the plugin's, for the owner reference alone.
	controlplanetest.WaitAllowed(t, sa, func(ctx context.Context, kc kubernetes.Interface) error {
		_, err := kc.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
	err = apply(ctx, sa)
	require.True(t, apierrors.IsForbidden(err), "applying the Deployment without the finalizers rule: %v", err)
	require.ErrorContains(t, err, "cannot set blockOwnerDeletion")
	t.Log(err)

	bind("finalizers", rbacv1.PolicyRule{APIGroups: []string{app.Memcached.Group}, Resources: []string{"memcacheds/finalizers"}, Verbs: []string{"update"}})
	controlplanetest.WaitAllowed(t, sa, apply)
	d, err := kc.AppsV1().Deployments(ns).Get(ctx, "owner", metav1.GetOptions{})
	require.NoError(t, err, "with the finalizers rule, the apply creates the Deployment")
	require.True(t, *d.OwnerReferences[0].BlockOwnerDeletion)
	deleteMemcached(t, e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns), "owner")
}

// config is the Config of a Memcached App that reconciles ns and holds its
// Lease there, as identity.
func config(t *testing.T, e apptest.Env, ns, identity string) app.Config {
	return app.Config{Connection: e.Connection(), Settings: e.Settings(app.FieldManager, ns, ns, identity), ProbesAddr: controlplanetest.FreeAddr(t)}
}

// testLifecycle creates a Memcached in ns, and follows it through the
// running App: applied, scaled by hand, deleted.
func testLifecycle(t *testing.T, e apptest.Env, ns string, tel *humustest.Telemetry) {
	kc := e.Kube
	memcacheds := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	m := createMemcached(t, memcacheds, "cache", 2)
	deployments := kc.AppsV1().Deployments(ns)

	t.Run("TheDeploymentIsAppliedAndOwned", func(t *testing.T) {
		d := waitDeployment(t, kc, ns, "cache")
		require.Len(t, d.OwnerReferences, 1)
		ref := d.OwnerReferences[0]
		require.Equal(t, "cache.example.com/v1beta1", ref.APIVersion)
		require.Equal(t, "Memcached", ref.Kind)
		require.Equal(t, "cache", ref.Name)
		require.Equal(t, m.GetUID(), ref.UID)
		require.True(t, *ref.Controller)
		require.True(t, *ref.BlockOwnerDeletion)
		require.Equal(t, int32(2), *d.Spec.Replicas)
		// The CRD's default, which the API server filled in.
		require.Equal(t, "memcached:1.6.26-alpine3.19", d.Spec.Template.Spec.Containers[0].Image)
	})

	t.Run("TheStatusIsApplied", func(t *testing.T) {
		// No kubelet runs the pods, nor a deployment controller counts
		// them, so none is available.
		c := waitCondition(t, memcacheds, "cache", metav1.ConditionFalse, "ReplicasUnavailable")
		require.Equal(t, "0/2 replicas available", c.Message)
	})

	t.Run("AvailableFollowsTheDeploymentsReplicasWithinASecond", func(t *testing.T) {
		// The test writes the Deployment's status as its controller would
		// once the kubelet ran both pods: the Memcached is reconciled on
		// that change of what it owns, and becomes Available.
		d, err := deployments.Get(t.Context(), "cache", metav1.GetOptions{})
		require.NoError(t, err)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
		}
		_, err = deployments.UpdateStatus(t.Context(), d, metav1.UpdateOptions{FieldManager: "deployment-controller"})
		require.NoError(t, err)
		start := time.Now()
		controlplanetest.Eventually(t, time.Second, "Available True", func(ctx context.Context) (bool, error) {
			got, err := memcacheds.Get(ctx, "cache", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			obj := decode(t, got)
			c := meta.FindStatusCondition(obj.Status.Conditions, "Available")
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "ReplicasAvailable" && c.Message == "2/2 replicas available" && obj.Status.ReadyReplicas == 2, nil
		})
		t.Logf("Available True %v after the Deployment's status said 2/2", time.Since(start).Round(time.Millisecond))
	})

	t.Run("TheFirstApplyIsANormalEventOnTheMemcached", func(t *testing.T) {
		ev := waitEvent(t, kc, ns, "cache", corev1.EventTypeNormal, "DeploymentApplied")
		require.Equal(t, "applied Deployment cache: 2 replicas of memcached:1.6.26-alpine3.19", ev.Note)
		require.Equal(t, m.GetUID(), ev.Regarding.UID)
	})

	t.Run("ManagedFieldsAreTheFieldManagersApplyAndApplyOnStatus", func(t *testing.T) {
		got, err := memcacheds.Get(t.Context(), "cache", metav1.GetOptions{})
		require.NoError(t, err)
		obj := decode(t, got)
		require.Equal(t, []string{app.FinalizerName}, obj.Finalizers)
		var applies []string
		for _, f := range obj.ManagedFields {
			if f.Manager == app.FieldManager {
				applies = append(applies, string(f.Operation)+" "+f.Subresource)
			}
		}
		require.ElementsMatch(t, []string{"Apply ", "Apply status"}, applies)
	})

	t.Run("AHandMadeScaleIsUndoneWithinASecond", func(t *testing.T) {
		scaleAndWaitUndone(t, deployments, "cache", 2)
	})

	t.Run("AChangeOfItsConfigMapIsAppliedWithinASecondReadFromTheCache", func(t *testing.T) {
		testConfigMap(t, e, ns, memcacheds, tel)
	})

	t.Run("DeletingRunsTheFinalizerOnceAndTheDeletionCompletes", func(t *testing.T) {
		deleteMemcached(t, memcacheds, "cache")
		// Of this namespace's: the App in a pod watches every namespace,
		// where another subtest's object may be being deleted.
		require.Equal(t, 1, apptest.CountRecords(tel, "memcached finalized", ns))
	})

	t.Run("TheGarbageCollectorRemovesTheDeployment", func(t *testing.T) {
		// On a cluster whose kube-controller-manager started before the
		// CRD, the garbage collector discovers memcacheds up to 30s later,
		// and only then sees its objects deleted.
		controlplanetest.Eventually(t, time.Minute, "the Deployment to be collected", func(ctx context.Context) (bool, error) {
			_, err := deployments.Get(ctx, "cache", metav1.GetOptions{})
			return apierrors.IsNotFound(err), controlplanetest.IgnoreNotFound(err)
		})
	})

	t.Run("AFailedReconcileIsAWarningEventOnTheMemcached", func(t *testing.T) {
		// 64 characters make a valid Memcached name but not a label value
		// (63 at most), so the API server refuses the Deployment's apply.
		name := strings.Repeat("m", 64)
		m := createMemcached(t, memcacheds, name, 1)
		ev := waitEvent(t, kc, ns, name, corev1.EventTypeWarning, kube.ReasonReconcileFailed)
		require.Equal(t, kube.ActionReconcile, ev.Action)
		require.Contains(t, ev.Note, "must be no more than 63")
		require.Equal(t, app.FieldManager, ev.ReportingController)
		require.Equal(t, "Memcached", ev.Regarding.Kind)
		require.Equal(t, m.GetUID(), ev.Regarding.UID)
		t.Logf("kubectl describe would show: %s %s: %s", ev.Type, ev.Reason, ev.Note)
		deleteMemcached(t, memcacheds, name)
	})
}

// testConfigMap shows the Controller's Watches of the ConfigMaps that
// Memcacheds name: the Memcached cache, in ns, is reconciled within a
// second of the ConfigMap it names being created or changed, with no
// After, and its Deployment runs memcached with the ConfigMap's options;
// the Reconciler reads the ConfigMap from the cache, with no GET of it.
func testConfigMap(t *testing.T, e apptest.Env, ns string, memcacheds dynamic.ResourceInterface, tel *humustest.Telemetry) {
	ctx := t.Context()
	configMaps := e.Kube.CoreV1().ConfigMaps(ns)
	deployments := e.Kube.AppsV1().Deployments(ns)

	// Named before it exists: Available False, and nothing applied that
	// the missing options would change.
	_, err := memcacheds.Patch(ctx, "cache", types.MergePatchType,
		[]byte(`{"spec":{"configMapName":"cache-options"}}`), metav1.PatchOptions{FieldManager: "test"})
	require.NoError(t, err)
	waitCondition(t, memcacheds, "cache", metav1.ConditionFalse, "ConfigMapNotFound")

	// Created, then changed: each is applied within a second, by the
	// watch alone, since the Reconciler returns no After.
	args := func(want ...string) {
		t.Helper()
		start := time.Now()
		controlplanetest.Eventually(t, time.Second, fmt.Sprintf("the Deployment's args to be %v", want), func(ctx context.Context) (bool, error) {
			d, err := deployments.Get(ctx, "cache", metav1.GetOptions{})
			return err == nil && slices.Equal(d.Spec.Template.Spec.Containers[0].Args, want), err
		})
		t.Logf("the Deployment ran memcached with %v %v after the ConfigMap's change", want, time.Since(start).Round(time.Millisecond))
	}
	cm, err := configMaps.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-options"},
		Data:       map[string]string{"memory-limit": "64"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	args("--memory-limit=64")
	waitReconciled(t, memcacheds, "cache")

	cm.Data["conn-limit"] = "512"
	cm.Data["memory-limit"] = "128"
	_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	args("--conn-limit=512", "--memory-limit=128")

	// Every ConfigMap request the App made is its informer's list or
	// watch of the collection, none a GET of one; its applies of the
	// Deployment show its requests are recorded.
	applies := 0
	for _, s := range tel.Spans() {
		for _, kv := range s.Attributes() {
			if kv.Key == "url.full" {
				require.NotContains(t, kv.Value.AsString(), "/configmaps/", "the App's request %s", s.Name())
				if strings.Contains(kv.Value.AsString(), "/deployments/cache?") {
					applies++
				}
			}
		}
	}
	require.NotZero(t, applies, "the App's recorded applies of the Deployment")
}

// waitCondition waits until the Memcached name's status has the condition
// Available of status and reason, of its current generation, and returns
// it.
func waitCondition(t *testing.T, ri dynamic.ResourceInterface, name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	controlplanetest.Eventually(t, 10*time.Second, "the Available condition "+string(status)+" "+reason, func(ctx context.Context) (bool, error) {
		got, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		obj := decode(t, got)
		c := meta.FindStatusCondition(obj.Status.Conditions, "Available")
		if c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == obj.Generation {
			found = *c
			return true, nil
		}
		return false, nil
	})
	return found
}

// waitEvent waits for an events.k8s.io Event in ns on the object name, of
// type typ and reason, listed as kubectl events lists them, and returns it.
func waitEvent(t *testing.T, kc kubernetes.Interface, ns, name, typ, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	controlplanetest.Eventually(t, 10*time.Second, "the "+typ+" Event "+reason+" on "+name, func(ctx context.Context) (bool, error) {
		l, err := kc.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range l.Items {
			if ev.Regarding.Name == name && ev.Type == typ && ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// createMemcached creates the Memcached name of size, leaving its image to
// the CRD's default.
func createMemcached(t *testing.T, ri dynamic.ResourceInterface, name string, size int64) *unstructured.Unstructured {
	t.Helper()
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": app.Memcached.GVR().GroupVersion().String(),
		"kind":       "Memcached",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": size},
	}}
	got, err := ri.Create(t.Context(), m, metav1.CreateOptions{FieldManager: "test", FieldValidation: "Strict"})
	require.NoError(t, err)
	return got
}

// deleteMemcached deletes the Memcached name and waits until it is gone,
// which needs a running App to finalize it.
func deleteMemcached(t *testing.T, ri dynamic.ResourceInterface, name string) {
	t.Helper()
	require.NoError(t, ri.Delete(t.Context(), name, metav1.DeleteOptions{}))
	controlplanetest.Eventually(t, 10*time.Second, "the Memcached to be gone", func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), controlplanetest.IgnoreNotFound(err)
	})
}

// waitDeployment waits for the Deployment name in ns, and returns it.
func waitDeployment(t *testing.T, kc kubernetes.Interface, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	controlplanetest.Eventually(t, 10*time.Second, "the Deployment", func(ctx context.Context) (bool, error) {
		var err error
		d, err = kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, controlplanetest.IgnoreNotFound(err)
	})
	return d
}

// waitReconciled waits until the Memcached name's status has an Available
// condition of its current generation that its Deployment's replicas
// decided: ReplicasAvailable, or ReplicasUnavailable, as on the local
// control plane, which runs no pod.
func waitReconciled(t *testing.T, ri dynamic.ResourceInterface, name string) {
	t.Helper()
	controlplanetest.Eventually(t, 10*time.Second, "the Available condition", func(ctx context.Context) (bool, error) {
		got, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		obj := decode(t, got)
		c := meta.FindStatusCondition(obj.Status.Conditions, "Available")
		return c != nil && (c.Reason == "ReplicasAvailable" || c.Reason == "ReplicasUnavailable") && c.ObservedGeneration == obj.Generation, nil
	})
}

// waitLeading waits up to 30s for the App whose telemetry is tel to lead:
// its record that it took the Lease and its caches caught up. The Lease
// names a replica before then, from the moment the API server stores its
// acquiring write.
func waitLeading(t *testing.T, tel *humustest.Telemetry) {
	t.Helper()
	controlplanetest.Eventually(t, 30*time.Second, "the App leading", func(context.Context) (bool, error) {
		for _, r := range tel.Records() {
			if r.Body().AsString() == "took the lease; the caches caught up" {
				return true, nil
			}
		}
		return false, nil
	})
}

// scaleAndWaitUndone scales the Deployment name by hand, as kubectl scale
// does, and waits up to a second for the App to put back want replicas.
func scaleAndWaitUndone(t *testing.T, deployments appsv1client.DeploymentInterface, name string, want int32) {
	t.Helper()
	scale, err := deployments.GetScale(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	scale.Spec.Replicas = want + 1
	_, err = deployments.UpdateScale(t.Context(), name, scale, metav1.UpdateOptions{FieldManager: "kubectl-scale"})
	require.NoError(t, err)
	start := time.Now()
	// The Deployment's watch queues its owner, as the spec's "within the
	// second" claim says (a resync, which would undo it too, is hours
	// away). Here it takes tens of milliseconds, so a second is a wide
	// margin even on a busy machine.
	controlplanetest.Eventually(t, time.Second, "the scale to be undone", func(ctx context.Context) (bool, error) {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return err == nil && *d.Spec.Replicas == want, err
	})
	t.Logf("the hand-made scale was undone in %v", time.Since(start).Round(time.Millisecond))
}

func decode(t *testing.T, u *unstructured.Unstructured) app.Object {
	t.Helper()
	var obj app.Object
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj))
	return obj
}

func abs(t *testing.T, path string) string {
	p, err := filepath.Abs(path)
	require.NoError(t, err)
	return p
}

// testOneRuleLess runs the App as a ServiceAccount bound to the deploy
// RBAC less one rule, the Controller's own list and watch on ConfigMaps
// (its Watches): the cache of ConfigMaps never syncs, and the App's
// readiness probe says why, in the API server's words, naming the verb,
// the resource and the scope.
func testOneRuleLess(t *testing.T, e apptest.Env) {
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		e.Apply(t, "../deploy/"+f)
	}
	ctx := t.Context()
	const sa = "memcached-one-rule-less"
	_, err := e.Kube.CoreV1().ServiceAccounts("memcached-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "memcached-system"}}
	cr, err := e.Kube.RbacV1().ClusterRoles().Get(ctx, app.FieldManager, metav1.GetOptions{})
	require.NoError(t, err)
	rules := slices.DeleteFunc(slices.Clone(cr.Rules), func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "configmaps") })
	require.Len(t, rules, len(cr.Rules)-1, "the deploy ClusterRole's configmaps rule")
	_, err = e.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sa},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.Kube.RbacV1().RoleBindings("memcached-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: app.FieldManager + "-leader-election"},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	probes := controlplanetest.FreeAddr(t)
	host := e.Pod(t, "memcached-system", sa, sa+"-0", apptest.PodEnv(map[string]string{appconfig.EnvProbesAddr: probes}))
	token, err := fs.ReadFile(host.FS, appconfig.ServiceAccountDir+"token")
	require.NoError(t, err)
	controlplanetest.WaitAllowed(t, e.WithToken(t, string(token)),
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		})

	a := apptest.Start(t, app.Init, host)
	// The reflector lists, or watches for a watch-list: the API server
	// names the verb it refused, list or watch.
	wants := []string{
		"its caches have not synced: the cache of /v1, Resource=configmaps: ",
		`configmaps is forbidden: User "system:serviceaccount:memcached-system:memcached-one-rule-less" cannot `,
		` resource "configmaps" in API group "" at the cluster scope`,
	}
	var body string
	controlplanetest.Eventually(t, 30*time.Second, "/readyz to name the forbidden list", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probes+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && !slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(body, w) }), nil
	})
	t.Logf("/readyz: %s", body)
	require.Equal(t, 0, a.Terminate(t))
}
