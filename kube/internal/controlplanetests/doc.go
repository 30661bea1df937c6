// Package controlplanetests is the root of a module of kube's own tests
// that need the controlplane module, kept out of the kube module so that
// its go.mod, which go mod tidy walks in every module that requires kube,
// doesn't require controlplane (issue 14):
//
//   - kube: the kube package's black-box tests against the local control
//     plane (build tag controlplane), and the unit tests of the CRD and
//     schema that share their types, which run without the tag;
//   - controllertools: kube's CRD against controller-gen's for
//     controller-tools' CronJob, offline and on the API server;
//   - conversion and admission: kube/conversion's and kube/admission's
//     webhooks, served by httpserver over TLS, called by the API server
//     for a two-version CRD and for labelled ConfigMaps;
//   - upstream: the embedded table of Kubernetes' types against the local
//     API server's /openapi/v3;
//   - cmd/upstreamgen: the command kube's go:generate runs to rewrite that
//     table.
//
// A test here reaches kube through its exported API only, and kube's
// internal packages through their import paths, which Go's internal rule
// allows under github.com/z5labs/humus/kube. Run the control-plane tests
// with
//
//	go test -tags controlplane ./kube/internal/controlplanetests/...
//
// from the repository's root (its go.work joins this module), as
// scripts/test.sh does.
package controlplanetests
