// Package appconfig is the code every example App needs beyond its
// Reconciler, public example code that an App of your own can import or
// copy: its kube.Connection in a pod, from what the kubelet provides, and
// locally from a kubeconfig (FromKubeconfig); its kube.Settings and probes'
// address from the environment (Read); its telemetry (BuildTelemetry):
// metrics in Prometheus' text format, traces and logs over OTLP when
// OTEL_EXPORTER_OTLP_* is set, readable console logs with
// LOG_FORMAT=console; and its metrics' Service (ServeMetrics): over TLS to
// the callers the API server authenticates and authorizes, or over plain
// HTTP on loopback for a local run. Every variable is read through the
// humus Host with the config package: the kube library itself reads no
// environment variable and owns no kubeconfig semantics, as its spec
// decides, so these choices are the App's, and this package is one App's
// way to make them.
//
// It is an example, not part of kube's API: it may change with the
// examples. Copy it if you need it to stay put.
package appconfig
