package kube

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestDefaultSettingsAreTheSpecsTable(t *testing.T) {
	s := DefaultSettings()
	require.Equal(t, Settings{
		Workers:        1,
		Resync:         10 * time.Hour,
		RetryBaseDelay: 5 * time.Millisecond,
		RetryMaxDelay:  1000 * time.Second,
		WatchTimeout:   30 * time.Second,
		CatchUpTimeout: 2 * time.Minute,
		LeaderElection: LeaderElection{
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
	}, s)
}

func TestChecks(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for valid
	}{
		{"name", CheckName("memcached-controller"), ""},
		{"name with dots", CheckName("memcached.cache.example.com"), ""},
		{"empty name", CheckName(""), "name is empty"},
		{"upper-case name", CheckName("Memcached"), `name "Memcached" is not a DNS-1123 subdomain`},
		{"every namespace", CheckWatchNamespace(""), ""},
		{"watch namespace", CheckWatchNamespace("team-a"), ""},
		{"watch namespace with a dot", CheckWatchNamespace("team.a"), `namespace "team.a" is not a DNS-1123 label`},
		{"namespace", CheckNamespace("kube-system"), ""},
		{"empty namespace", CheckNamespace(""), "namespace is empty"},
		{"long namespace", CheckNamespace(long), "is not a DNS-1123 label"},
		{"identity", CheckIdentity("pod-1"), ""},
		{"empty identity", CheckIdentity(""), "identity is empty"},
		{"workers", CheckWorkers(1), ""},
		{"no workers", CheckWorkers(0), "workers is 0: it must be at least 1"},
		{"resync", CheckResync(time.Minute), ""},
		{"zero resync", CheckResync(0), "resync is 0s: it must be positive"},
		{"retry delay", CheckRetryDelay(time.Millisecond), ""},
		{"negative retry delay", CheckRetryDelay(-time.Second), "retry delay is -1s: it must be positive"},
		{"watch timeout", CheckWatchTimeout(time.Second), ""},
		{"zero watch timeout", CheckWatchTimeout(0), "watch timeout is 0s: it must be positive"},
		{"catch-up timeout", CheckCatchUpTimeout(time.Second), ""},
		{"negative catch-up timeout", CheckCatchUpTimeout(-time.Second), "catch-up timeout is -1s: it must be positive"},
		{"retry period", CheckRetryPeriod(time.Second), ""},
		{"zero retry period", CheckRetryPeriod(0), "retry period is 0s: it must be positive"},
		{"field selector", CheckFieldSelector("spec.tier=gold,metadata.name!=old"), ""},
		{"empty field selector", CheckFieldSelector(""), ""},
		{"field selector without an operator", CheckFieldSelector("spec.tier"), `field selector "spec.tier" doesn't parse`},
		{"client-go verbosity", CheckClientGoVerbosity(10), ""},
		{"negative client-go verbosity", CheckClientGoVerbosity(-1), "client-go verbosity is -1: it must be 0 to 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" {
				require.NoError(t, tc.err)
				return
			}
			require.ErrorContains(t, tc.err, tc.want)
		})
	}
}

func noopReconciler() Reconciler[widgetSpec, widgetStatus] {
	return ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
		return Result[widgetStatus]{}, nil
	})
}

func TestNewControllerNamesEveryMistake(t *testing.T) {
	settings := DefaultSettings() // no Name, no Lease namespace or identity
	settings.Workers = 0
	settings.RetryBaseDelay = time.Minute
	settings.RetryMaxDelay = time.Second
	settings.LeaderElection.RenewDeadline = 20 * time.Second
	settings.Namespace = "team-a"
	settings.ClientGoVerbosity = 11
	settings.FieldSelector = "spec.size"
	r := widgets()
	r.Group = ""
	r.Scope = Cluster

	_, err := newController(&humus.Setup{}, clients{}, nil, settings, r, noopReconciler(),
		Owns(schema.GroupVersionResource{Group: "apps", Resource: "deployments"}),
		Finalize("test.example.com/cleanup", func(ctx context.Context, ns corev1.Namespace) error { return nil }),
	)
	require.Error(t, err)
	for _, want := range []string{
		"Settings.Name is empty",
		"Settings.Workers is 0",
		"Settings.LeaderElection.Namespace is empty",
		"Settings.LeaderElection.Identity is empty",
		"Settings.RetryMaxDelay 1s is less than Settings.RetryBaseDelay 1m0s",
		"Settings.LeaderElection.LeaseDuration 15s must be longer than RenewDeadline 20s",
		`Widget is cluster-scoped, so Settings.Namespace must be "", not "team-a"`,
		"Owns(apps/, Resource=deployments) has no Version",
		"f takes a v1.Namespace, not the controller's kube.Object[",
		"Settings.ClientGoVerbosity is 11: it must be 0 to 10",
		`Settings.FieldSelector "spec.size" doesn't parse`,
	} {
		require.ErrorContains(t, err, want)
	}
	_, crdErr := r.CRD()
	require.Error(t, crdErr)
	require.ErrorContains(t, err, crdErr.Error(), "the Resource's mistakes, as CRD reports them")
}

func TestNewControllerChecksRenewDeadlineAgainstRetryPeriod(t *testing.T) {
	settings := testSettings()
	settings.LeaderElection.RetryPeriod = 9 * time.Second
	_, err := newController(&humus.Setup{}, clients{}, nil, settings, widgets(), noopReconciler())
	require.ErrorContains(t, err, "Settings.LeaderElection.RenewDeadline 10s must be longer than 10.8s, 1.2 RetryPeriods")
}

func TestNewControllerRejectsBadParts(t *testing.T) {
	f := func(context.Context, widget) error { return nil }
	_, err := newController(&humus.Setup{}, clients{}, nil, testSettings(), widgets(), noopReconciler(),
		Finalize("not a name!", f),
		Finalize[widget]("test.example.com/nil", nil),
		Finalize("test.example.com/one", f),
		Finalize("test.example.com/two", f),
		nil,
	)
	require.ErrorContains(t, err, `part 0: Finalize "not a name!": its name is not a qualified name`)
	require.ErrorContains(t, err, `part 1: Finalize "test.example.com/nil": f is nil`)
	require.ErrorContains(t, err, `part 3: Finalize "test.example.com/two": a controller has one Finalize, and "test.example.com/one" came first`)
	require.ErrorContains(t, err, "part 4 is <nil>")
}

func TestNewControllerNeedsAClient(t *testing.T) {
	_, err := NewController(&humus.Setup{}, nil, testSettings(), widgets(), noopReconciler())
	require.ErrorContains(t, err, "kube: the Client is nil")
}

func TestNewKindControllerNamesEveryMistake(t *testing.T) {
	settings := testSettings()
	settings.Namespace = "team-a"
	rec := KindReconcilerFunc[corev1.Namespace](func(context.Context, corev1.Namespace) (time.Duration, error) { return 0, nil })

	_, err := newKindController(&humus.Setup{}, clients{}, nil, settings,
		Kind[corev1.Namespace]{GVR: schema.GroupVersionResource{Resource: "namespaces"}, Scope: Cluster}, rec,
		Finalize("example.com/f", func(context.Context, widget) error { return nil }))
	require.Error(t, err)
	for _, want := range []string{
		`Kind.GVR "/, Resource=namespaces" has no Version`,
		"Kind.Kind is empty",
		`is cluster-scoped, so Settings.Namespace must be "", not "team-a"`,
		"f takes a kube.Object[",
	} {
		require.ErrorContains(t, err, want)
	}

	type notAnObject struct{ Name string }
	_, err = newKindController(&humus.Setup{}, clients{}, nil, testSettings(),
		Kind[notAnObject]{GVR: namespaceGVR, Kind: "Thing", Scope: "Global"},
		KindReconcilerFunc[notAnObject](func(context.Context, notAnObject) (time.Duration, error) { return 0, nil }))
	require.ErrorContains(t, err, `Kind.Scope "Global" is neither "Namespaced" nor "Cluster"`)
	require.ErrorContains(t, err, "*kube.notAnObject is not a metav1.Object")

	_, err = newKindController[corev1.Namespace](&humus.Setup{}, clients{}, nil, testSettings(), namespaces(), nil)
	require.ErrorContains(t, err, "the KindReconciler is nil")
	// A nil func is a nil Reconciler too: it would panic on every reconcile.
	_, err = newKindController(&humus.Setup{}, clients{}, nil, testSettings(), namespaces(), KindReconcilerFunc[corev1.Namespace](nil))
	require.ErrorContains(t, err, "the KindReconciler is nil")
}

// failingMeter is a Meter whose instruments can't be created.
type failingMeter struct{ noop.Meter }

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errInstrument
}

func (failingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errInstrument
}

type failingMeterProvider struct{ noop.MeterProvider }

func (failingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

const errInstrument = errorString("no instruments today")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestNewControllerFailsWhenAnInstrumentCannotBeCreated(t *testing.T) {
	_, err := newController(&humus.Setup{Telemetry: humus.Telemetry{MeterProvider: failingMeterProvider{}}},
		clients{}, nil, testSettings(), widgets(), noopReconciler())
	require.ErrorIs(t, err, errInstrument)
	require.ErrorContains(t, err, "creating the instrument humus.kube.controller.queue.adds")
	require.ErrorContains(t, err, "creating the instrument humus.kube.controller.queue.duration")
	require.ErrorContains(t, err, "creating the instrument humus.kube.controller.reconcile.duration")
}

func TestNewControllerNamesNonPositiveLeaseDurations(t *testing.T) {
	settings := testSettings()
	settings.LeaderElection.LeaseDuration = 0
	settings.LeaderElection.RenewDeadline = -time.Second
	settings.LeaderElection.RetryPeriod = -time.Second
	_, err := newController(&humus.Setup{}, clients{}, nil, settings, widgets(), noopReconciler())
	for _, want := range []string{
		"Settings.LeaderElection.LeaseDuration is 0s: it must be positive",
		"Settings.LeaderElection.RenewDeadline is -1s: it must be positive",
		"Settings.LeaderElection.RetryPeriod is -1s: it must be positive",
	} {
		require.ErrorContains(t, err, want)
	}
	// Non-positive durations are named once, not compared with each other.
	require.NotContains(t, err.Error(), "must be longer than")
}

func TestALeaseDurationIsWholeSeconds(t *testing.T) {
	for _, d := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 20*time.Second + time.Nanosecond} {
		settings := testSettings()
		settings.LeaderElection.LeaseDuration = d
		settings.LeaderElection.RenewDeadline = 400 * time.Millisecond
		settings.LeaderElection.RetryPeriod = 100 * time.Millisecond
		_, err := newController(&humus.Setup{}, clients{}, nil, settings, widgets(), noopReconciler())
		require.ErrorContains(t, err, "Settings.LeaderElection.LeaseDuration "+d.String()+" must be a whole number of seconds", "LeaseDuration %v", d)
	}
}

func TestALeaseDurationFitsLeaseDurationSeconds(t *testing.T) {
	// 700000h is 2520000000s, past an int32: client-go would write it as
	// -1774967296, which the API server refuses on every Lease write.
	settings := testSettings()
	settings.LeaderElection.LeaseDuration = 700000 * time.Hour
	_, err := newController(&humus.Setup{}, clients{}, nil, settings, widgets(), noopReconciler())
	require.ErrorContains(t, err, "Settings.LeaderElection.LeaseDuration 700000h0m0s is longer than 596523h14m7s, the most a Lease's leaseDurationSeconds (an int32) holds")

	settings.LeaderElection.LeaseDuration = math.MaxInt32 * time.Second
	_, err = newController(&humus.Setup{}, clients{}, nil, settings, widgets(), noopReconciler())
	require.NoError(t, err)
}

func TestCheckNameRefusesAFieldManagerTheAPIServerWould(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 10) // 138 bytes
	require.Empty(t, validation.IsDNS1123Subdomain(long), "a valid DNS-1123 subdomain")
	require.ErrorContains(t, CheckName(long), "name is 138 bytes: a field manager is at most 128")
	require.NoError(t, CheckName(long[:127]))
}
