// Package crdversions builds the versions and spec.conversion of the CRD of
// a resource with more than one version: every version besides the
// resource's own (the hub), each with its own schema, columns and
// selectable fields, served, stored and deprecated as declared, and the
// conversion, None when every version encodes as the hub does, or else
// through a webhook whose client config it checks as the API server does.
// Package kube's Version, NewVersion, VersionOptions, WebhookClient and
// Resource.CRD are its public face, and document what the CRD holds; this
// package owns the checks and the building. Each version's schema is
// internal/crdschema's; the conversions themselves are kube/conversion's.
//
// Its surface is CRD and the Resource and Version it takes; WebhookClient,
// the conversion webhook's client, with IsZero; and ZeroVersion, the
// mistake of a zero Version, which kube's Resource.Conversion names too.
//
// Its invariants:
//
//   - Every mistake in the versions and the webhook's client is collected
//     and returned as one error (errors.Join), each named by its place in
//     Resource.Versions (and its name and Go type) or
//     Resource.ConversionWebhook, with a nil CRD.
//   - The resource's own version comes first in spec.versions, followed by
//     Versions in their order; exactly one version is stored: the one
//     Version whose Storage is set, or else the resource's own.
//   - A version without conversion functions has the hub's schema, without
//     rules but for the whole schemas of types that encode themselves
//     (its spec and status encode alike), or is refused, also when that
//     can't be compared; and the conversion
//     strategy is None only when every version is such; then no webhook is
//     given, and otherwise one is required.
//
// It holds no state between calls.
package crdversions
