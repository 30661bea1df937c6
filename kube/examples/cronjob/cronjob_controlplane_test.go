//go:build controlplane

package cronjob_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/cronjob"
)

// TestCronJobControllerReadsItsJobsStatusThroughTheIndex runs the CronJob
// controller against a real API server. The local control plane runs no
// Job controller, so the test writes each Job's status as the Job
// controller would: the controller hears of it through its Owns (the Jobs
// cached whole) and reads it through the index by controller owner,
// reporting the active, successful and failed Jobs and deleting those
// beyond the history limits.
func TestCronJobControllerReadsItsJobsStatusThroughTheIndex(t *testing.T) {
	e := controlplanetest.NewEnv(t, controlplanetest.Start(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	crd, err := cronjob.CronJobs.CRD()
	require.NoError(t, err)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	require.NoError(t, err)
	crds := e.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	_, err = crds.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	require.NoError(t, err)
	controlplanetest.Eventually(t, 30*time.Second, "the CronJob CRD to be served", func(ctx context.Context) (bool, error) {
		_, err := e.Dynamic.Resource(cronjob.CronJobs.GVR()).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	ns := e.Namespace(t, "cronjob")

	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: e.Cluster.Server, TLS: e.Cluster.TLS,
		Token: func(context.Context) (string, error) { return e.Cluster.Token, nil }})
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "cronjob-controller"
	settings.Namespace = ns
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = "replica-1"
	ctrl, err := kube.NewController(s, client, settings, cronjob.CronJobs, cronjob.Reconciler{Kube: kc}, cronjob.Parts()...)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, ctrl.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})

	cronJobs := e.Dynamic.Resource(cronjob.CronJobs.GVR()).Namespace(ns)
	setRun := func(run string) {
		t.Helper()
		_, err := cronJobs.Patch(ctx, "nightly", types.MergePatchType, []byte(`{"spec":{"run":"`+run+`"}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	_, err = cronJobs.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": "nightly"},
		"spec":     map[string]any{"run": "1", "image": "busybox", "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)

	status := func() cronjob.Status {
		got, err := cronJobs.Get(ctx, "nightly", metav1.GetOptions{})
		require.NoError(t, err)
		var cj cronjob.CronJob
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &cj))
		return cj.Status
	}
	waitStatus := func(what string, want cronjob.Status) {
		t.Helper()
		controlplanetest.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) {
			return slices.Equal(status().Active, want.Active) && status().Succeeded == want.Succeeded && status().Failed == want.Failed, nil
		})
	}
	// finish writes job's status as the Job controller would on its end.
	finish := func(name string, how batchv1.JobConditionType) {
		t.Helper()
		jobs := e.Kube.BatchV1().Jobs(ns)
		j, err := jobs.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		now := metav1.Now()
		j.Status.StartTime = &now
		if how == batchv1.JobComplete {
			j.Status.CompletionTime = &now
			j.Status.Succeeded = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
			}
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonBackoffLimitExceeded},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonBackoffLimitExceeded},
			}
		}
		_, err = jobs.UpdateStatus(ctx, j, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	waitStatus("run 1 to be active", cronjob.Status{Active: []string{"nightly-1"}})
	finish("nightly-1", batchv1.JobComplete)
	waitStatus("run 1 to have succeeded", cronjob.Status{Succeeded: 1})

	setRun("2")
	waitStatus("run 2 to be active", cronjob.Status{Active: []string{"nightly-2"}, Succeeded: 1})
	finish("nightly-2", batchv1.JobFailed)
	waitStatus("run 2 to have failed", cronjob.Status{Succeeded: 1, Failed: 1})

	setRun("3")
	waitStatus("run 3 to be active", cronjob.Status{Active: []string{"nightly-3"}, Succeeded: 1, Failed: 1})
	finish("nightly-3", batchv1.JobComplete)
	waitStatus("run 3 to have succeeded, run 1 deleted past the history limit", cronjob.Status{Succeeded: 1, Failed: 1})
	controlplanetest.Eventually(t, 30*time.Second, "run 1's Job to be deleted", func(ctx context.Context) (bool, error) {
		l, err := e.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var got []string
		for _, j := range l.Items {
			got = append(got, j.Name)
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"nightly-2", "nightly-3"}), nil
	})
}
