package sharding

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/priorityqueue"
)

// Config is what a member needs of its controller, which kube fills in
// from its Settings, clients, informers and telemetry.
type Config struct {
	// Identity is LeaderElection.Identity: the member's own.
	Identity string
	// Name is Settings.Name, the value of every member's Lease's Label.
	Name string
	// LeaseName is the member's Lease's, Settings.Name-Identity, in
	// Namespace, LeaderElection.Namespace.
	LeaseName string
	Namespace string
	Durations Durations
	// Client reaches the Leases, and lists and watches the others'.
	Client kubernetes.Interface
	// Queue is the controller's work queue: the member queues the keys it
	// gains there, and asks it the priority of a key it drops.
	Queue *priorityqueue.Queue[string]
	// Objects is the resource's informer, started already: its keys are
	// the ones the member owns some of.
	Objects cache.SharedIndexInformer
	// AddHandler adds an event handler to an informer, Objects or the
	// member's own on the Leases.
	AddHandler func(cache.SharedIndexInformer, cache.ResourceEventHandler) error
	// Tenure is the member's deadline and loss.
	Tenure Tenure
	// Agreed, if not nil, is called, on the member's loop, each time the
	// member takes up a view every live member has acknowledged: Agreed
	// returns it from then on. It must not block.
	Agreed func()
	// ErrOtherHolder is the cause a member loses its tenure with when
	// another identity holds its Lease.
	ErrOtherHolder error
	// Meter makes the member's gauges, recorded with Attrs.
	Meter metric.Meter
	Attrs metric.MeasurementOption
	Log   *slog.Logger
}

// Durations are LeaderElection's: a Lease unrenewed for LeaseDuration
// has expired; a member stops working RenewDeadline after the start of
// its last renewal; it renews every RetryPeriod.
type Durations struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Tenure is a member's right to work under its Lease: the deadline and
// the loss, the half a member shares with kube's leader. Once begun
// (Commence), it holds until RenewDeadline after the start of the last
// renewal that succeeded, or until it is lost; lost, it is lost for good.
type Tenure interface {
	// Context ends when the tenure is lost, with the cause.
	Context() context.Context
	// Renewed records a Lease write that started at start and succeeded:
	// it moves the deadline on, unless the write started at or after the
	// deadline, too late, which loses the tenure.
	Renewed(start time.Time)
	// Commence starts the work the tenure allows, until its deadline.
	Commence()
	// Lose ends the tenure for good with cause, a failure.
	Lose(cause error)
	// Release ends the tenure gracefully, as the member leaves.
	Release()
	// LostErr is why the tenure was lost, or nil.
	LostErr() error
	// Current returns why a Lease write mustn't be sent (the tenure was
	// lost, or its deadline has passed by the clock now), or nil.
	Current() error
	// Valid returns nil while the member may work: its tenure has begun,
	// is not lost, and its deadline has not passed by the clock now.
	Valid() error
}

// New returns the controller's member, not yet joined, with its handlers
// on cfg.Objects (the count of the keys it owns, countObject) and on the
// informer of the others' Leases (seen, gone).
func New(cfg Config) (*Member, error) {
	inst, err := newShardInstruments(cfg.Meter)
	if err != nil {
		return nil, err
	}
	m := &Member{
		id:             cfg.Identity,
		instance:       string(uuid.NewUUID()),
		name:           cfg.Name,
		leaseName:      cfg.LeaseName,
		ns:             cfg.Namespace,
		le:             cfg.Durations,
		leases:         cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		queue:          cfg.Queue,
		objects:        cfg.Objects.GetIndexer(),
		inst:           inst,
		attrs:          cfg.Attrs,
		tenure:         cfg.Tenure,
		agreed:         cfg.Agreed,
		errOtherHolder: cfg.ErrOtherHolder,
		log:            cfg.Log,
		wake:           make(chan struct{}, 1),
		inflight:       map[string]*take{},
		dropped:        map[string]priorityqueue.Priority{},
		peers:          map[string]*peer{},
		mine:           map[uint64]struct{}{},
	}
	// The resource informer, started already, hands the handler an add
	// for each object it holds, then every add and delete.
	if err := cfg.AddHandler(cfg.Objects, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.countObject(obj, true) },
		DeleteFunc: func(obj any) { m.countObject(obj, false) },
	}); err != nil {
		return nil, err
	}
	selector := Label + "=" + cfg.Name
	m.informer = coordinationinformers.NewFilteredLeaseInformer(cfg.Client, cfg.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	if err := cfg.AddHandler(m.informer, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.seen(obj) },
		UpdateFunc: func(_, obj any) { m.seen(obj) },
		DeleteFunc: m.gone,
	}); err != nil {
		return nil, err
	}
	return m, nil
}
