// Package deps pins the kube module's dependencies while its packages are
// being written side by side. It is removed once they import them.
package deps

import (
	_ "github.com/go-logr/logr"
	_ "github.com/stretchr/testify/require"
	_ "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	_ "go.opentelemetry.io/otel/log"
	_ "go.opentelemetry.io/otel/metric"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "go.opentelemetry.io/otel/trace"
	_ "go.uber.org/goleak"
	_ "golang.org/x/net/http2"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/dynamic/fake"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/metadata"
	_ "k8s.io/client-go/metadata/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/util/workqueue"
	_ "k8s.io/klog/v2"
	_ "sigs.k8s.io/yaml"
)
