// Command memcached runs the Memcached operator, app.Init, as a humus App.
//
// In a pod it reaches the API server with its service account, and takes
// the Lease's namespace and its identity from POD_NAMESPACE and POD_NAME
// (see ../../deploy/deployment.yaml). Locally, KUBECONFIG names a
// kubeconfig to use instead:
//
//	KUBECONFIG=$HOME/.kube/config POD_NAMESPACE=default POD_NAME=$(hostname) go run ./kube/examples/memcached/cmd/memcached
//
// It stops on SIGTERM or SIGINT, exiting 0 once the Lease is released.
package main

import (
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

func main() {
	humus.Main(app.Init, humus.WithTelemetry(app.BuildTelemetry))
}
