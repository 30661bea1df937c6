package kube

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// LeaderElection is the Lease a controller's replicas elect their leader
// with. The Lease is named after Settings.Name. Its durations default to
// kube-controller-manager's: 15s, 10s and 2s.
//
// The leader works only until RenewDeadline after the start of its last
// Lease update that succeeded, by its monotonic clock, and not at all once
// it has seen another holder in the Lease: past that, it takes no key,
// sends no apply (the client's transport checks the deadline again as
// each create, update, patch or delete of a reconcile enters it, so a
// reconcile stalled past it by a GC pause or a SIGSTOP gets the lease's
// error), and cancels the reconciles in flight, then Serve returns
// ErrLostLeadership. The Lease is released only on a graceful stop, within
// RetryPeriod, never after it was lost.
type LeaderElection struct {
	Namespace string // the Lease's namespace, such as the pod's; a DNS-1123 label, required
	Identity  string // this replica's name in the Lease, unique among replicas, such as its pod's; required (two processes with one identity both hold the Lease)

	LeaseDuration time.Duration // how long a Lease lasts without renewal; whole seconds, longer than RenewDeadline, at most math.MaxInt32 seconds (leaseDurationSeconds is an int32)
	RenewDeadline time.Duration // how long the leader tries to renew; longer than 1.2 RetryPeriods
	RetryPeriod   time.Duration // how often a replica tries to take or renew; positive
}

// Settings configures a Controller. Every field is a plain value. Start from
// DefaultSettings, and set Name and LeaderElection's Namespace and Identity,
// which have no default: humus imposes no name and no namespace.
type Settings struct {
	// Name is the controller's field manager, its work queue's name, and
	// its Lease's name. A DNS-1123 subdomain of at most 128 bytes, a field
	// manager's limit; required.
	Name string

	// Namespace limits the controller to one namespace. "" (the default)
	// means every namespace. A cluster-scoped Resource or Kind takes only "".
	Namespace string

	// LabelSelector limits the controller to the objects of its resource
	// whose labels it selects, in kubectl's syntax, such as
	// "shard=a,tier!=cache": the informer lists and watches only those, so
	// no other object is cached or reconciled. "" (the default) selects
	// every object. It must parse (CheckLabelSelector). Owns and Watches
	// take their own, through LabelSelector.
	LabelSelector string

	// FieldSelector limits the controller to the objects of its resource
	// whose fields it selects, in kubectl's syntax, such as
	// "spec.tier=gold,metadata.name!=old": the informer lists and watches
	// only those (and so does the catch-up's list), so no other object is
	// cached or reconciled. "" (the default) selects every object. It must
	// parse (CheckFieldSelector). The API server accepts only
	// metadata.name, metadata.namespace and the fields the CRD declares in
	// selectableFields (Resource.SelectableFields; KEP-4358, GA in
	// Kubernetes 1.32), and refuses any other with a 400 Bad Request at
	// list time: Serve's first list carries the selectors, so Serve ends
	// with that error. Owns and Watches don't take one.
	FieldSelector string

	// Workers is how many objects are reconciled at once; at least 1,
	// default 1. One object is never reconciled twice at once.
	Workers int

	// Resync reconciles every object again this often; positive, default
	// 10h.
	Resync time.Duration

	// RetryBaseDelay and RetryMaxDelay bound the backoff of an object whose
	// reconcile failed: the delay doubles from the first to the second.
	// Both positive, RetryMaxDelay at least RetryBaseDelay; default 5ms and
	// 1000s, the per-object backoff of client-go's
	// DefaultTypedControllerRateLimiter. All retries together are also
	// limited to 10 a second, bursting to 100, as that limiter does. An
	// outage of the API server (every reconcile failing alike, 401, 403,
	// 429, 5xx or a timeout, with none succeeding for a second) backs no
	// object off: its objects are queued again as soon as a reconcile
	// succeeds, and one of them at a time is retried meanwhile, every 15s
	// at most (or RetryMaxDelay, if shorter).
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration

	// WatchTimeout bounds how long a cache may go without a watch on the
	// API server: past it, Synced reports the cache stale, and if the
	// resource itself has been unserved that long (its list or watch
	// answered NotFound, as once its CRD is deleted), Serve ends with the
	// error it gives for a resource that isn't served at its start.
	// Positive, default 30s, the longest of client-go's watch retry
	// backoffs.
	WatchTimeout time.Duration

	// CatchUpTimeout bounds how long a replica that has just taken the
	// Lease waits for its caches to catch up with the API server (every
	// informer's watch open) before its workers start. Past it, Serve
	// releases the Lease and returns an error naming the caches behind.
	// Positive, default 2m: client-go's reflector retries a broken list
	// or watch after a backoff that grows to between 30s and 60s (a 30s
	// cap, jittered up to twice), so after an outage of more than about
	// 15s a healthy replica's caches may open their watches a minute
	// after the API server returns, and a retry that meets the API server
	// still starting waits once more.
	CatchUpTimeout time.Duration

	LeaderElection LeaderElection

	// Sharding shares the objects among the replicas, each reconciling
	// its own, instead of electing one leader; off by default. See
	// Sharding.
	Sharding Sharding

	// MigrateStorage makes the leader, once its caches have caught up,
	// rewrite every object of the resource so that the API server stores
	// it at the CRD's storage version, then set the CRD's
	// status.storedVersions to that version alone, so that an older
	// version can be removed from the CRD. A run that finds
	// storedVersions already so does nothing more; an interrupted run is
	// started over by the next leader. Off by default. For a Resource
	// only (its CRD, plural.group, is the controller's own), with
	// Settings.Namespace "" (it rewrites every namespace's objects), and
	// not with Sharding, which has no leader. It needs get and update on
	// the CRD's customresourcedefinitions/status. See "Storage migration"
	// in docs/writing-a-kubernetes-controller.md.
	MigrateStorage bool

	// ClientGoVerbosity is the highest klog verbosity of client-go's own
	// records (its reflectors', work queue's and leader election's, and
	// those of any client-go call made with a reconcile's context) that
	// reach s.Telemetry's LoggerProvider: 0 to 10, default 0, which passes
	// on V(0) and errors, as klog shows by default. V(1) to V(4) arrive as
	// DEBUG severities, V(5) and up as TRACE. From V(8) they hold whole
	// request and response bodies, a Secret's data among them: raise it to
	// debug client-go, never in production.
	ClientGoVerbosity int
}

// DefaultSettings returns the default Settings: every namespace,
// 1 worker, a 10h resync, retries from 5ms to 1000s, a watch timeout of
// 30s, a catch-up timeout of 2m, and a Lease of 15s
// renewed within 10s, tried every 2s. Name, LeaderElection.Namespace and
// LeaderElection.Identity are left empty, for the caller to set.
func DefaultSettings() Settings {
	return Settings{
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
	}
}

// CheckName returns an error unless name is a DNS-1123 subdomain of at most
// 128 bytes, as Settings.Name must be: a Lease's name is a DNS-1123
// subdomain, and the API server refuses a field manager longer than 128
// bytes.
func CheckName(name string) error { return checkName("name", name) }

// CheckWatchNamespace returns an error unless ns is "" (every namespace) or
// a DNS-1123 label, as Settings.Namespace must be.
func CheckWatchNamespace(ns string) error { return checkWatchNamespace("namespace", ns) }

// CheckLabelSelector returns an error unless selector parses as a label
// selector in kubectl's syntax (apimachinery's labels.Parse), as
// Settings.LabelSelector and LabelSelector's must; "" selects everything.
func CheckLabelSelector(selector string) error {
	return checkLabelSelector("label selector", selector)
}

// CheckFieldSelector returns an error unless selector parses as a field
// selector in kubectl's syntax (apimachinery's fields.ParseSelector), as
// Settings.FieldSelector must; "" selects everything. Whether the API
// server accepts its fields is known only when it lists: see
// Settings.FieldSelector.
func CheckFieldSelector(selector string) error {
	return checkFieldSelector("field selector", selector)
}

// CheckNamespace returns an error unless ns is a DNS-1123 label, as the
// Lease's LeaderElection.Namespace must be.
func CheckNamespace(ns string) error { return checkNamespace("namespace", ns) }

// CheckIdentity returns an error if id, LeaderElection.Identity, is empty.
func CheckIdentity(id string) error { return checkIdentity("identity", id) }

// CheckWorkers returns an error unless n, Settings.Workers, is at least 1.
func CheckWorkers(n int) error { return checkWorkers("workers", n) }

// CheckResync returns an error unless d, Settings.Resync, is positive.
func CheckResync(d time.Duration) error { return checkPositive("resync", d) }

// CheckRetryDelay returns an error unless d, Settings.RetryBaseDelay or
// Settings.RetryMaxDelay, is positive.
func CheckRetryDelay(d time.Duration) error { return checkPositive("retry delay", d) }

// CheckClientGoVerbosity returns an error unless v,
// Settings.ClientGoVerbosity, is 0 to 10, the verbosities client-go logs at.
func CheckClientGoVerbosity(v int) error { return checkVerbosity("client-go verbosity", v) }

// CheckWatchTimeout returns an error unless d, Settings.WatchTimeout, is
// positive.
func CheckWatchTimeout(d time.Duration) error { return checkPositive("watch timeout", d) }

// CheckCatchUpTimeout returns an error unless d, Settings.CatchUpTimeout,
// is positive.
func CheckCatchUpTimeout(d time.Duration) error { return checkPositive("catch-up timeout", d) }

// CheckRetryPeriod returns an error unless d, LeaderElection.RetryPeriod, is
// positive.
func CheckRetryPeriod(d time.Duration) error { return checkPositive("retry period", d) }

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("kube: %s is empty: it must be a DNS-1123 subdomain", what)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("kube: %s %q is not a DNS-1123 subdomain: %s", what, name, strings.Join(errs, "; "))
	}
	// The API server refuses a longer field manager on every apply.
	if len(name) > metav1validation.FieldManagerMaxLength {
		return fmt.Errorf("kube: %s is %d bytes: a field manager is at most %d", what, len(name), metav1validation.FieldManagerMaxLength)
	}
	return nil
}

func checkWatchNamespace(what, ns string) error {
	if ns == "" {
		return nil
	}
	return checkNamespace(what, ns)
}

func checkNamespace(what, ns string) error {
	if ns == "" {
		return fmt.Errorf("kube: %s is empty: it must be a DNS-1123 label", what)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("kube: %s %q is not a DNS-1123 label: %s", what, ns, strings.Join(errs, "; "))
	}
	return nil
}

func checkLabelSelector(what, selector string) error {
	if _, err := labels.Parse(selector); err != nil {
		return fmt.Errorf("kube: %s %q doesn't parse: %w", what, selector, err)
	}
	return nil
}

func checkFieldSelector(what, selector string) error {
	if _, err := fields.ParseSelector(selector); err != nil {
		return fmt.Errorf("kube: %s %q doesn't parse: %w", what, selector, err)
	}
	return nil
}

func checkIdentity(what, id string) error {
	if id == "" {
		return fmt.Errorf("kube: %s is empty", what)
	}
	return nil
}

func checkWorkers(what string, n int) error {
	if n < 1 {
		return fmt.Errorf("kube: %s is %d: it must be at least 1", what, n)
	}
	return nil
}

// maxClientGoVerbosity is the highest verbosity client-go logs at: V(10),
// a response body whole.
const maxClientGoVerbosity = 10

func checkVerbosity(what string, v int) error {
	if v < 0 || v > maxClientGoVerbosity {
		return fmt.Errorf("kube: %s is %d: it must be 0 to %d", what, v, maxClientGoVerbosity)
	}
	return nil
}

func checkPositive(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("kube: %s is %v: it must be positive", what, d)
	}
	return nil
}

// maxLeaseDuration is the longest LeaderElection.LeaseDuration: a Lease
// holds it in leaseDurationSeconds, an int32.
const maxLeaseDuration = math.MaxInt32 * time.Second

// check returns one error naming every mistake in s, each by its field.
func (s Settings) check() error {
	le := s.LeaderElection
	errs := []error{
		checkName("Settings.Name", s.Name),
		checkWatchNamespace("Settings.Namespace", s.Namespace),
		checkLabelSelector("Settings.LabelSelector", s.LabelSelector),
		checkFieldSelector("Settings.FieldSelector", s.FieldSelector),
		checkWorkers("Settings.Workers", s.Workers),
		checkPositive("Settings.Resync", s.Resync),
		checkPositive("Settings.RetryBaseDelay", s.RetryBaseDelay),
		checkPositive("Settings.RetryMaxDelay", s.RetryMaxDelay),
		checkPositive("Settings.WatchTimeout", s.WatchTimeout),
		checkPositive("Settings.CatchUpTimeout", s.CatchUpTimeout),
		checkNamespace("Settings.LeaderElection.Namespace", le.Namespace),
		checkIdentity("Settings.LeaderElection.Identity", le.Identity),
		checkPositive("Settings.LeaderElection.LeaseDuration", le.LeaseDuration),
		checkPositive("Settings.LeaderElection.RenewDeadline", le.RenewDeadline),
		checkPositive("Settings.LeaderElection.RetryPeriod", le.RetryPeriod),
		checkVerbosity("Settings.ClientGoVerbosity", s.ClientGoVerbosity),
		CheckSharding(s),
		checkMigrateStorage(s),
	}
	if s.RetryBaseDelay > 0 && s.RetryMaxDelay > 0 && s.RetryMaxDelay < s.RetryBaseDelay {
		errs = append(errs, fmt.Errorf("kube: Settings.RetryMaxDelay %v is less than Settings.RetryBaseDelay %v", s.RetryMaxDelay, s.RetryBaseDelay))
	}
	// client-go's NewLeaderElector rejects these, and durations under 1ns,
	// but only once Serve builds it; the spec checks them up front.
	// A Lease holds its duration in whole seconds (leaseDurationSeconds):
	// 1.5s would be stored as 1s, and under a second as 0, which the API
	// server refuses.
	if le.LeaseDuration > 0 && le.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("kube: Settings.LeaderElection.LeaseDuration %v must be a whole number of seconds, as a Lease's leaseDurationSeconds is", le.LeaseDuration))
	}
	// leaseDurationSeconds is an int32: a longer duration would wrap to a
	// negative one, which the API server refuses on every Lease write, so
	// the replica would retry forever without ever leading.
	if le.LeaseDuration > maxLeaseDuration {
		errs = append(errs, fmt.Errorf("kube: Settings.LeaderElection.LeaseDuration %v is longer than %v, the most a Lease's leaseDurationSeconds (an int32) holds: use seconds to minutes, such as the default 15s", le.LeaseDuration, maxLeaseDuration))
	}
	if le.LeaseDuration > 0 && le.RenewDeadline > 0 && le.LeaseDuration <= le.RenewDeadline {
		errs = append(errs, fmt.Errorf("kube: Settings.LeaderElection.LeaseDuration %v must be longer than RenewDeadline %v", le.LeaseDuration, le.RenewDeadline))
	}
	if min := time.Duration(leaderelection.JitterFactor * float64(le.RetryPeriod)); le.RenewDeadline > 0 && le.RetryPeriod > 0 && le.RenewDeadline <= min {
		errs = append(errs, fmt.Errorf("kube: Settings.LeaderElection.RenewDeadline %v must be longer than %v, 1.2 RetryPeriods", le.RenewDeadline, min))
	}
	return errors.Join(errs...)
}
