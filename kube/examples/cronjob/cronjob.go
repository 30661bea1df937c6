// Package cronjob ports the child-Job logic of the kubebuilder book's
// CronJob controller (book.kubebuilder.io, "Implementing a controller") to
// github.com/z5labs/humus/kube: list the Jobs a CronJob controls, sort
// them into active, successful and failed by their status conditions,
// report the active ones in the status, delete the oldest beyond the
// history limits, and start the Job of a run not started yet.
//
// Where the book lists every Job of the namespace with a field index it
// registers on the manager (jobOwnerKey) and reads each whole, this
// controller Owns its Jobs with CacheObjects, and reads a CronJob's Jobs
// with one call, Lister.ControlledBy, from the Owns' cache's index by
// controller owner: no index of its own, no scan of the namespace, and its
// own creation of a Job doesn't come back as work.
//
// The book's cron schedule, which needs a cron parser, is left out: a run
// is started when spec.run names one no Job of the CronJob carries yet.
package cronjob

import (
	"context"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// Spec is what a CronJob declares: the run wanted, the image its Jobs run,
// and how many finished Jobs of each outcome are kept.
type Spec struct {
	// Run names the run wanted; a Job of a run no Job of the CronJob
	// carries is started. "" starts none.
	Run   string `json:"run,omitempty"`
	Image string `json:"image"`
	// SuccessfulJobsHistoryLimit and FailedJobsHistoryLimit are how many
	// successful and failed Jobs are kept, the oldest deleted first; nil
	// keeps them all, as the book's.
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32 `json:"failedJobsHistoryLimit,omitempty"`
}

// Status is what the controller reports of a CronJob's Jobs, read from
// their status: the active ones by name, and how many successful and
// failed ones are kept.
type Status struct {
	Active    []string `json:"active,omitempty"`
	Succeeded int32    `json:"succeeded,omitempty"`
	Failed    int32    `json:"failed,omitempty"`
	LastRun   string   `json:"lastRun,omitempty"`
}

// CronJob is a cronjobs.batch.tutorial.kubebuilder.io object.
type CronJob = kube.Object[Spec, Status]

// CronJobs is the resource cronjobs.batch.tutorial.kubebuilder.io, the
// book's group, version v1.
var CronJobs = kube.Resource[Spec, Status]{
	Group:   "batch.tutorial.kubebuilder.io",
	Version: "v1",
	Kind:    "CronJob",
	Plural:  "cronjobs",
	Scope:   kube.Namespaced,
}

// Jobs is the resource the controller Owns.
var Jobs = batchv1.SchemeGroupVersion.WithResource("jobs")

// RunAnnotation is the annotation on each Job naming its run, in place of
// the book's scheduled-at time.
const RunAnnotation = "batch.tutorial.kubebuilder.io/run"

// Parts are the controller's Parts: it Owns its Jobs whole, so that it
// reads their status from the cache.
func Parts() []kube.Part {
	return []kube.Part{kube.Owns(Jobs, kube.CacheObjects())}
}

// Sorted is a CronJob's Jobs, sorted as the book sorts them.
type Sorted struct {
	Active, Successful, Failed []batchv1.Job
}

// ChildJobs returns the Jobs cj controls, from the reconcile's cache of
// Jobs (ctx is the reconcile's), sorted into active, successful and
// failed, each oldest first.
func ChildJobs(ctx context.Context, cj CronJob) (Sorted, error) {
	jobs, err := kube.ListerFrom[batchv1.Job](ctx, Jobs)
	if err != nil {
		return Sorted{}, err
	}
	children, err := jobs.ControlledBy(cj.UID)
	if err != nil {
		return Sorted{}, err
	}
	var s Sorted
	for _, job := range children {
		switch _, finished := isJobFinished(&job); finished {
		case "": // ongoing
			s.Active = append(s.Active, job)
		case batchv1.JobFailed:
			s.Failed = append(s.Failed, job)
		case batchv1.JobComplete:
			s.Successful = append(s.Successful, job)
		}
	}
	for _, l := range [][]batchv1.Job{s.Active, s.Successful, s.Failed} {
		slices.SortFunc(l, olderFirst)
	}
	return s, nil
}

// isJobFinished is the book's: a Job is finished when its Complete or
// Failed condition is True, and that condition's type is how.
func isJobFinished(job *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c.Type
		}
	}
	return false, ""
}

// olderFirst orders Jobs by start time, as the book's history cleanup
// does, a Job not started yet first, and then by name.
func olderFirst(a, b batchv1.Job) int {
	switch {
	case a.Status.StartTime == nil && b.Status.StartTime != nil:
		return -1
	case a.Status.StartTime != nil && b.Status.StartTime == nil:
		return 1
	case a.Status.StartTime != nil && !a.Status.StartTime.Equal(b.Status.StartTime):
		if a.Status.StartTime.Before(b.Status.StartTime) {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

// Reconciler is the CronJob controller's Reconciler. Kube writes the
// Jobs; it reads them from the controller's cache.
type Reconciler struct {
	Kube kubernetes.Interface
}

// Reconcile sorts cj's Jobs, deletes the oldest finished ones beyond the
// history limits, starts the Job of spec.run if no Job of cj carries that
// run, and reports the Jobs left.
func (r Reconciler) Reconcile(ctx context.Context, cj CronJob) (kube.Result[Status], error) {
	s, err := ChildJobs(ctx, cj)
	if err != nil {
		return kube.Result[Status]{}, err
	}
	if s.Successful, err = r.keep(ctx, s.Successful, cj.Spec.SuccessfulJobsHistoryLimit); err != nil {
		return kube.Result[Status]{}, err
	}
	if s.Failed, err = r.keep(ctx, s.Failed, cj.Spec.FailedJobsHistoryLimit); err != nil {
		return kube.Result[Status]{}, err
	}
	status := Status{Succeeded: int32(len(s.Successful)), Failed: int32(len(s.Failed))}
	for _, job := range s.Active {
		status.Active = append(status.Active, job.Name)
	}
	for _, l := range [][]batchv1.Job{s.Active, s.Successful, s.Failed} {
		for _, job := range l {
			if run := job.Annotations[RunAnnotation]; run != "" && run == cj.Spec.Run {
				status.LastRun = run
			}
		}
	}
	if cj.Spec.Run != "" && status.LastRun != cj.Spec.Run {
		job := r.jobFor(cj)
		_, err := r.Kube.BatchV1().Jobs(cj.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: "cronjob-controller"})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return kube.Result[Status]{Status: &status}, fmt.Errorf("starting run %q of %s/%s: %w", cj.Spec.Run, cj.Namespace, cj.Name, err)
		}
		status.Active = append(status.Active, job.Name)
		status.LastRun = cj.Spec.Run
	}
	return kube.Result[Status]{Status: &status}, nil
}

// keep deletes the oldest of jobs, finished ones oldest first, beyond
// limit (nil keeps them all), as the book's cleanup does, in the
// background, so their pods go with them, and returns those kept.
func (r Reconciler) keep(ctx context.Context, jobs []batchv1.Job, limit *int32) ([]batchv1.Job, error) {
	if limit == nil || len(jobs) <= int(*limit) {
		return jobs, nil
	}
	drop := len(jobs) - int(max(*limit, 0))
	background := metav1.DeletePropagationBackground
	for _, job := range jobs[:drop] {
		err := r.Kube.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
			PropagationPolicy: &background,
			Preconditions:     &metav1.Preconditions{UID: &job.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting old job %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	return jobs[drop:], nil
}

// jobFor is the Job of cj's run: named after the CronJob and the run,
// annotated with the run, controlled by cj.
func (r Reconciler) jobFor(cj CronJob) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            cj.Name + "-" + cj.Spec.Run,
			Namespace:       cj.Namespace,
			Annotations:     map[string]string{RunAnnotation: cj.Spec.Run},
			OwnerReferences: []metav1.OwnerReference{CronJobs.ControllerRef(cj)},
		},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "run", Image: cj.Spec.Image}},
			}},
		},
	}
}
