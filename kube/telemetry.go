package kube

import (
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/z5labs/humus"
	"go.opentelemetry.io/otel/metric"

	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

// instrumentationScope is the instrumentation scope of everything kube
// records itself: the controller's spans, records and instruments, and
// the Client's records (transport.go).
const instrumentationScope = ktel.Scope

// attrController is the attribute humus.kube.controller.name, the
// controller's Settings.Name (internal/telemetry).
const attrController = ktel.AttrController

// telemetry is everything a Controller records with, all from s.Telemetry
// under one scope (internal/telemetry): a reconcile's span, records and
// duration (StartReconcile), a panic outside one (Panicked), the work
// queue's instruments (QueueMetrics). A nil provider records nothing.
type telemetry struct {
	*ktel.Telemetry
	log   *slog.Logger // the controller's own records
	klog  logr.Logger  // client-go's records, put in its context
	meter metric.Meter // for the sharding and storage migration instruments
}

// newTelemetry builds the telemetry of the controller named name, whose
// client-go records pass up to klog verbosity v.
func newTelemetry(t humus.Telemetry, name string, v int) (*telemetry, error) {
	tel, err := ktel.New(t, name, v)
	if err != nil {
		return nil, err
	}
	return &telemetry{Telemetry: tel, log: tel.Log(), klog: tel.Klog(), meter: tel.Meter()}, nil
}
