// Package conversion serves a CRD's conversion webhook: the API server
// POSTs a ConversionReview (apiextensions.k8s.io/v1) to it whenever an
// object is read or written at a version other than the one it is stored
// at, and Handler answers it with typed Go conversions, as
// controller-runtime's pkg/webhook/conversion does with its Hub and
// Convertible interfaces and a scheme.
//
// # Declaring the conversions
//
// Each version of a kind decodes into a Go type of its own. One version is
// the hub (usually the storage version); every other is a Spoke, with a
// function to the hub and one from it:
//
//	widgets := conversion.Kind[v2.Widget]{
//		Group: "example.com", Kind: "Widget", Hub: "v2",
//		Spokes: []conversion.Spoke[v2.Widget]{
//			conversion.NewSpoke("v1", v1ToV2, v2ToV1), // func(*v1.Widget, *v2.Widget) error, and back
//		},
//	}
//	h, err := conversion.Handler(s, widgets)
//
// The compiler checks that a spoke's two functions agree on its type and
// the hub's, and that the hub's is the Kind's; Handler checks the rest
// before anything is served, and names every mistake in one error: a
// missing direction, a version declared twice, a spoke that is also the
// hub, one kind registered twice with two hubs.
//
// # Serving it
//
// Handler is an http.Handler. Mount it at Path and serve it with package
// httpserver over TLS, from a Service every replica runs from its start
// (not only the leader, and before the caches sync: the API server calls
// any replica behind the Service, and the App's own informers list
// through it):
//
//	mux := http.NewServeMux()
//	mux.Handle(conversion.Path, h)
//	certs, err := httpserver.CertDir(s, "tmp/k8s-webhook-server/serving-certs") // cert-manager's Secret, mounted
//	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: mux, Certificate: certs})
//
// # Testing the conversions
//
// RoundTrip, called in a unit test, converts fuzzed objects of every spoke
// to the hub and back, and of the hub to every spoke and back, with the
// functions Handler serves, and names the first JSON paths that came back
// different:
//
//	require.NoError(t, conversion.RoundTrip(widgets, conversion.RoundTripOptions{}))
//
// It lives here, not in a package of its own, because it calls the Kind's
// unexported converters; it returns an error rather than taking a
// testing.TB, so that this package does not import package testing.
//
// # Fields one version lacks
//
// A field only the hub's version has is lost on its way through a spoke
// unless the spoke is Preserving: it keeps what the spoke cannot hold in
// the annotation PreservedAnnotation and restores it on the way back, but
// not over a value the write through the spoke changed. In a list, it is
// restored only onto the same element: one with the same list-map keys
// (PreservingWith; package kube gives a Resource's from its schema), or,
// in a list without keys, only when the write left the whole list as it
// was read; otherwise it is lost, never moved onto another element.
//
// RoundTrip compares numbers exactly (an int64 above 2^53 that came back
// rounded is a difference), with the list and number rules Preserving and
// package admission's patch use.
//
// # How the pieces will connect (a design note)
//
// This package is the webhook alone, standalone from the kube package's
// CRD code, so that a later change wires versions in without touching it:
//
//   - kube.Resource grows a list of versions, each with its Spec and Status
//     types (kube.Object[Spec, Status] is then each version's Go type
//     here), Rules, columns, served, storage and deprecation. The storage
//     version is the hub; each other version carries its two functions,
//     and the Resource builds the Kind for Handler from them, so the user
//     declares a version once.
//   - CRD() then emits every version, and spec.conversion: strategy
//     Webhook, conversionReviewVersions [v1], and a clientConfig naming
//     the App's Service and Path (or a URL, for a local run), with the
//     caBundle: the CA of the files' issuer, or httpserver.Authority's
//     CABundle when the App makes its own certificate (kept in a Secret and
//     patched into the CRD by the App, with RBAC on that one CRD and that
//     one Secret).
//   - The controller watches one version, and its Reconciler sees that
//     version's type; the API server converts every other through this
//     webhook.
//
// Only this package's Kind and NewSpoke carry the type parameters; Handler
// sees versions as functions of any, so one Handler serves every kind of
// an App.
package conversion
