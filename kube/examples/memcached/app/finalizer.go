package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
)

// FinalizerName is the finalizer the controller keeps on every Memcached
// until Finalizer.Finalize has run.
const FinalizerName = "cache.example.com/finalizer"

// Finalizer is the clean-up that runs when a Memcached is deleted, before
// the API server removes it. A Memcached keeps no state outside the cluster,
// and its Deployment is garbage collected through its owner reference, so
// Finalize stands for the clean-up a real operator does elsewhere, such as
// deregistering the cache from a service catalogue. It records that it ran:
// one INFO log record, "memcached finalized", with the object's namespace
// and name, and one count of the memcached.finalizations instrument.
type Finalizer struct {
	Logger        log.Logger
	Finalizations metric.Int64Counter
}

// NewFinalizer returns a Finalizer that records with lp and mp, under the
// scope github.com/z5labs/humus/kube/examples/memcached/app. It returns the
// error of creating the memcached.finalizations counter.
func NewFinalizer(lp log.LoggerProvider, mp metric.MeterProvider) (Finalizer, error) {
	const scope = "github.com/z5labs/humus/kube/examples/memcached/app"
	n, err := mp.Meter(scope).Int64Counter("memcached.finalizations",
		metric.WithDescription("Memcacheds whose finalizer ran."),
		metric.WithUnit("{memcached}"))
	if err != nil {
		return Finalizer{}, err
	}
	return Finalizer{Logger: lp.Logger(scope), Finalizations: n}, nil
}

// Finalize records that m was finalized. It never fails, so the controller
// removes FinalizerName and the deletion completes at once.
func (f Finalizer) Finalize(ctx context.Context, m Object) error {
	var r log.Record
	r.SetSeverity(log.SeverityInfo)
	r.SetSeverityText("INFO")
	r.SetBody(attribute.StringValue("memcached finalized"))
	r.AddAttributes(
		attribute.String("k8s.namespace.name", m.Namespace),
		attribute.String("humus.kube.object.name", m.Name),
	)
	f.Logger.Emit(ctx, r)
	f.Finalizations.Add(ctx, 1)
	return nil
}
