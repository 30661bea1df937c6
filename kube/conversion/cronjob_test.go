package conversion_test

// The kubebuilder book's multiversion CronJob
// (docs/book/src/multiversion-tutorial/testdata/project/api in
// kubernetes-sigs/kubebuilder, at 5c400728930120dd385712db61cb0a937238ce81),
// ported to this package: its v1 (the hub and storage version) and v2 (a
// spoke whose schedule is a struct of cron fields) types, field for field,
// without their markers, the List types and scheme registration (which
// conversion does not use), and its ConvertTo and ConvertFrom as the
// functions NewSpoke takes.
//
// The book's conversions copy status.active and status.lastScheduleTime but
// not status.conditions, so every conversion drops an object's conditions:
// TestCronJobBookConversionsLoseStatusConditions shows RoundTrip naming
// that, and the port below copies them.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/z5labs/humus/kube/conversion"
)

// v1, the hub: the schedule is a cron string.
type (
	CronJobV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitzero"`
		Spec              CronJobSpecV1   `json:"spec"`
		Status            CronJobStatusV1 `json:"status,omitzero"`
	}
	CronJobSpecV1 struct {
		Schedule                   string                  `json:"schedule"`
		StartingDeadlineSeconds    *int64                  `json:"startingDeadlineSeconds,omitempty"`
		ConcurrencyPolicy          ConcurrencyPolicyV1     `json:"concurrencyPolicy,omitempty"`
		Suspend                    *bool                   `json:"suspend,omitempty"`
		JobTemplate                batchv1.JobTemplateSpec `json:"jobTemplate"`
		SuccessfulJobsHistoryLimit *int32                  `json:"successfulJobsHistoryLimit,omitempty"`
		FailedJobsHistoryLimit     *int32                  `json:"failedJobsHistoryLimit,omitempty"`
	}
	ConcurrencyPolicyV1 string
	CronJobStatusV1     struct {
		Active           []corev1.ObjectReference `json:"active,omitempty"`
		LastScheduleTime *metav1.Time             `json:"lastScheduleTime,omitempty"`
		Conditions       []metav1.Condition       `json:"conditions,omitempty"`
	}
)

// v2, a spoke: the schedule is a struct of cron fields, nil for "*".
type (
	CronJobV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitzero"`
		Spec              CronJobSpecV2   `json:"spec"`
		Status            CronJobStatusV2 `json:"status,omitzero"`
	}
	CronJobSpecV2 struct {
		Schedule                   CronSchedule            `json:"schedule"`
		StartingDeadlineSeconds    *int64                  `json:"startingDeadlineSeconds,omitempty"`
		ConcurrencyPolicy          ConcurrencyPolicyV2     `json:"concurrencyPolicy,omitempty"`
		Suspend                    *bool                   `json:"suspend,omitempty"`
		JobTemplate                batchv1.JobTemplateSpec `json:"jobTemplate"`
		SuccessfulJobsHistoryLimit *int32                  `json:"successfulJobsHistoryLimit,omitempty"`
		FailedJobsHistoryLimit     *int32                  `json:"failedJobsHistoryLimit,omitempty"`
	}
	CronSchedule struct {
		Minute     *CronField `json:"minute,omitempty"`
		Hour       *CronField `json:"hour,omitempty"`
		DayOfMonth *CronField `json:"dayOfMonth,omitempty"`
		Month      *CronField `json:"month,omitempty"`
		DayOfWeek  *CronField `json:"dayOfWeek,omitempty"`
	}
	CronField           string
	ConcurrencyPolicyV2 string
	CronJobStatusV2     struct {
		Active           []corev1.ObjectReference `json:"active,omitempty"`
		LastScheduleTime *metav1.Time             `json:"lastScheduleTime,omitempty"`
		Conditions       []metav1.Condition       `json:"conditions,omitempty"`
	}
)

// cronV2ToV1 is the book's v2 ConvertTo, plus status.conditions.
func cronV2ToV1(src *CronJobV2, dst *CronJobV1) error {
	bookV2ToV1(src, dst)
	dst.Status.Conditions = src.Status.Conditions
	return nil
}

// cronV1ToV2 is the book's v2 ConvertFrom, plus status.conditions.
func cronV1ToV2(src *CronJobV1, dst *CronJobV2) error {
	if err := bookV1ToV2(src, dst); err != nil {
		return err
	}
	dst.Status.Conditions = src.Status.Conditions
	return nil
}

// bookV2ToV1 is the book's (*v2.CronJob).ConvertTo, as it is (its log line
// aside).
func bookV2ToV1(src *CronJobV2, dst *CronJobV1) {
	sched := src.Spec.Schedule
	scheduleParts := []string{"*", "*", "*", "*", "*"}
	if sched.Minute != nil {
		scheduleParts[0] = string(*sched.Minute)
	}
	if sched.Hour != nil {
		scheduleParts[1] = string(*sched.Hour)
	}
	if sched.DayOfMonth != nil {
		scheduleParts[2] = string(*sched.DayOfMonth)
	}
	if sched.Month != nil {
		scheduleParts[3] = string(*sched.Month)
	}
	if sched.DayOfWeek != nil {
		scheduleParts[4] = string(*sched.DayOfWeek)
	}
	dst.Spec.Schedule = strings.Join(scheduleParts, " ")

	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.StartingDeadlineSeconds = src.Spec.StartingDeadlineSeconds
	dst.Spec.ConcurrencyPolicy = ConcurrencyPolicyV1(src.Spec.ConcurrencyPolicy)
	dst.Spec.Suspend = src.Spec.Suspend
	dst.Spec.JobTemplate = src.Spec.JobTemplate
	dst.Spec.SuccessfulJobsHistoryLimit = src.Spec.SuccessfulJobsHistoryLimit
	dst.Spec.FailedJobsHistoryLimit = src.Spec.FailedJobsHistoryLimit
	dst.Status.Active = src.Status.Active
	dst.Status.LastScheduleTime = src.Status.LastScheduleTime
}

// bookV1ToV2 is the book's (*v2.CronJob).ConvertFrom, as it is (its log
// line aside).
func bookV1ToV2(src *CronJobV1, dst *CronJobV2) error {
	schedParts := strings.Split(src.Spec.Schedule, " ")
	if len(schedParts) != 5 {
		return fmt.Errorf("invalid schedule: not a standard 5-field schedule")
	}
	partIfNeeded := func(raw string) *CronField {
		if raw == "*" {
			return nil
		}
		part := CronField(raw)
		return &part
	}
	dst.Spec.Schedule.Minute = partIfNeeded(schedParts[0])
	dst.Spec.Schedule.Hour = partIfNeeded(schedParts[1])
	dst.Spec.Schedule.DayOfMonth = partIfNeeded(schedParts[2])
	dst.Spec.Schedule.Month = partIfNeeded(schedParts[3])
	dst.Spec.Schedule.DayOfWeek = partIfNeeded(schedParts[4])

	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.StartingDeadlineSeconds = src.Spec.StartingDeadlineSeconds
	dst.Spec.ConcurrencyPolicy = ConcurrencyPolicyV2(src.Spec.ConcurrencyPolicy)
	dst.Spec.Suspend = src.Spec.Suspend
	dst.Spec.JobTemplate = src.Spec.JobTemplate
	dst.Spec.SuccessfulJobsHistoryLimit = src.Spec.SuccessfulJobsHistoryLimit
	dst.Spec.FailedJobsHistoryLimit = src.Spec.FailedJobsHistoryLimit
	dst.Status.Active = src.Status.Active
	dst.Status.LastScheduleTime = src.Status.LastScheduleTime
	return nil
}

func cronJobs(toHub func(*CronJobV2, *CronJobV1) error, fromHub func(*CronJobV1, *CronJobV2) error) conversion.Kind[CronJobV1] {
	return conversion.Kind[CronJobV1]{
		Group: "batch.tutorial.kubebuilder.io", Kind: "CronJob", Hub: "v1",
		Spokes: []conversion.Spoke[CronJobV1]{conversion.NewSpoke("v2", toHub, fromHub)},
	}
}

// cronFields are valid cron fields other than "*": the book's v2 writes
// "*" as an absent field, so a v2 field of "*" is not a valid object (it
// would come back absent), and a field has no space.
var cronFields = []string{"*", "0", "30", "*/5", "1-5", "1,15", "MON-FRI"}

// cronFuncs make fuzzed CronJobs valid: a v1 schedule of five
// space-separated fields, as the book's ConvertFrom requires (it refuses
// "@hourly", which v1 otherwise accepts), and a v2 field of one.
func cronFuncs() []any {
	field := func(c randfill.Continue) string { return cronFields[c.Intn(len(cronFields))] }
	return []any{
		func(s *CronJobSpecV1, c randfill.Continue) {
			c.FillNoCustom(s)
			parts := make([]string, 5)
			for i := range parts {
				parts[i] = field(c)
			}
			s.Schedule = strings.Join(parts, " ")
		},
		func(f *CronField, c randfill.Continue) {
			*f = CronField(cronFields[1+c.Intn(len(cronFields)-1)])
		},
	}
}

func TestCronJobConversionsRoundTrip(t *testing.T) {
	require.NoError(t, conversion.RoundTrip(cronJobs(cronV2ToV1, cronV1ToV2), conversion.RoundTripOptions{Funcs: cronFuncs()}))
}

func TestCronJobBookConversionsLoseStatusConditions(t *testing.T) {
	bookTo := func(src *CronJobV2, dst *CronJobV1) error { bookV2ToV1(src, dst); return nil }
	err := conversion.RoundTrip(cronJobs(bookTo, bookV1ToV2), conversion.RoundTripOptions{Funcs: cronFuncs()})
	require.Error(t, err)
	require.Regexp(t, `CronJob\.batch\.tutorial\.kubebuilder\.io v2 → hub v1 → v2 \(seed 1, iteration \d+\): came back different at status\.conditions: sent \[\{`, err.Error())
	require.Regexp(t, `CronJob\.batch\.tutorial\.kubebuilder\.io hub v1 → v2 → hub v1 \(seed 1, iteration \d+\): came back different at status\.conditions: sent \[\{`, err.Error())
	require.NotContains(t, err.Error(), "spec.", "the book's conversions keep the whole spec")
}

func TestCronJobBrokenScheduleConversionFailsWithItsPath(t *testing.T) {
	// A ConvertTo that forgets the day of week writes "*" for it.
	forgetsDayOfWeek := func(src *CronJobV2, dst *CronJobV1) error {
		s := *src
		s.Spec.Schedule.DayOfWeek = nil
		return cronV2ToV1(&s, dst)
	}
	err := conversion.RoundTrip(cronJobs(forgetsDayOfWeek, cronV1ToV2), conversion.RoundTripOptions{Funcs: cronFuncs()})
	require.Error(t, err)
	require.Regexp(t, `v2 → hub v1 → v2 \(seed 1, iteration \d+\): came back different at spec\.schedule\.dayOfWeek: sent "[^"]+", got absent`, err.Error())
	require.Regexp(t, `hub v1 → v2 → hub v1 \(seed 1, iteration \d+\): came back different at spec\.schedule: sent "(\S+ ){4}\S+", got "(\S+ ){4}\*"`, err.Error())
}
