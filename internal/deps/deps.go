// Package deps pins the core module's dependencies while its packages are
// being written side by side. It is removed once they import them.
package deps

import (
	_ "github.com/stretchr/testify/require"
	_ "go.opentelemetry.io/contrib/bridges/otelslog"
	_ "go.opentelemetry.io/otel/log"
	_ "go.opentelemetry.io/otel/log/noop"
	_ "go.opentelemetry.io/otel/metric/noop"
	_ "go.opentelemetry.io/otel/propagation"
	_ "go.opentelemetry.io/otel/sdk/log"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.opentelemetry.io/otel/sdk/trace/tracetest"
	_ "go.opentelemetry.io/otel/trace/noop"
	_ "go.uber.org/goleak"
)
