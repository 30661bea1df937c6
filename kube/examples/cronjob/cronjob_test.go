package cronjob_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/cronjob"
)

func cronJob(name string, spec cronjob.Spec) cronjob.CronJob {
	return cronjob.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       spec,
	}
}

// job is Job name of the run run, controlled by the CronJob owner,
// started at minute start, with conditions.
func job(owner cronjob.CronJob, name, run string, start int, conds ...batchv1.JobCondition) *batchv1.Job {
	t := metav1.NewTime(time.Date(2026, 12, 2, 6, start, 0, 0, time.UTC))
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Annotations:     map[string]string{cronjob.RunAnnotation: run},
			OwnerReferences: []metav1.OwnerReference{cronjob.CronJobs.ControllerRef(owner)}},
		Status: batchv1.JobStatus{StartTime: &t, Conditions: conds},
	}
}

func condition(typ batchv1.JobConditionType, status corev1.ConditionStatus) batchv1.JobCondition {
	return batchv1.JobCondition{Type: typ, Status: status}
}

func names(jobs []batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	return out
}

// The book's sort, read through the Owns' index by controller owner: a
// CronJob's Jobs, and only its own, sorted by their status conditions
// into active, successful and failed, oldest first.
func TestChildJobsSortsTheCronJobsOwnJobsByTheirConditions(t *testing.T) {
	cj := cronJob("nightly", cronjob.Spec{Image: "busybox"})
	other := cronJob("hourly", cronjob.Spec{Image: "busybox"})
	rt, err := kube.NewReconcileTest("cronjob-controller", kube.TestOwnedObjects(cronjob.Jobs,
		job(cj, "nightly-3", "3", 3),
		job(cj, "nightly-1", "1", 1, condition(batchv1.JobComplete, corev1.ConditionTrue)),
		job(cj, "nightly-2", "2", 2, condition(batchv1.JobFailed, corev1.ConditionTrue)),
		job(cj, "nightly-0", "0", 0, condition(batchv1.JobComplete, corev1.ConditionTrue)),
		job(cj, "nightly-4", "4", 4, condition(batchv1.JobComplete, corev1.ConditionFalse)),
		job(other, "hourly-1", "1", 1, condition(batchv1.JobComplete, corev1.ConditionTrue)),
	))
	require.NoError(t, err)

	s, err := cronjob.ChildJobs(rt.Context(t.Context()), cj)
	require.NoError(t, err)
	require.Equal(t, []string{"nightly-3", "nightly-4"}, names(s.Active), "a Job whose Complete condition isn't True is active")
	require.Equal(t, []string{"nightly-0", "nightly-1"}, names(s.Successful))
	require.Equal(t, []string{"nightly-2"}, names(s.Failed))
}

// A reconcile deletes the oldest finished Jobs beyond the history limits,
// starts the Job of a run not started, and reports what is left.
func TestReconcileKeepsTheHistoryAndStartsANewRun(t *testing.T) {
	cj := cronJob("nightly", cronjob.Spec{Run: "5", Image: "busybox",
		SuccessfulJobsHistoryLimit: ptr.To[int32](1), FailedJobsHistoryLimit: ptr.To[int32](0)})
	jobs := []*batchv1.Job{
		job(cj, "nightly-0", "0", 0, condition(batchv1.JobComplete, corev1.ConditionTrue)),
		job(cj, "nightly-1", "1", 1, condition(batchv1.JobComplete, corev1.ConditionTrue)),
		job(cj, "nightly-2", "2", 2, condition(batchv1.JobFailed, corev1.ConditionTrue)),
		job(cj, "nightly-3", "3", 3),
	}
	kc := kubefake.NewClientset(jobs[0], jobs[1], jobs[2], jobs[3])
	var cached []any
	for _, j := range jobs {
		cached = append(cached, j)
	}
	rt, err := kube.NewReconcileTest("cronjob-controller", kube.TestOwnedObjects(cronjob.Jobs, cached...))
	require.NoError(t, err)

	res, err := cronjob.Reconciler{Kube: kc}.Reconcile(rt.Context(t.Context()), cj)
	require.NoError(t, err)
	require.Equal(t, &cronjob.Status{Active: []string{"nightly-3", "nightly-5"}, Succeeded: 1, Failed: 0, LastRun: "5"}, res.Status)

	left, err := kc.BatchV1().Jobs("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"nightly-1", "nightly-3", "nightly-5"}, names(left.Items), "the oldest successful and the failed Job are deleted; run 5 is started")
	started, err := kc.BatchV1().Jobs("ns").Get(t.Context(), "nightly-5", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, cj.UID, started.OwnerReferences[0].UID)
	require.True(t, *started.OwnerReferences[0].Controller)
}
