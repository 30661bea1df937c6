// Package crdschema builds a custom resource's CustomResourceDefinition
// from Go types: it reflects Spec and Status into one structural OpenAPI
// schema as encoding/json encodes them, applies the user's rules to it, and
// resolves printer columns. Package kube's Resource.CRD, TypeRules, FieldOf,
// ValuesOf and Columns are its public face, and document what the CRD
// holds; this package owns how it is made. Its name says what it makes: the
// schema of a CRD, not the runtime's use of one.
//
// Its surface is CRD and the Resource it takes; Rules, Field, Constraint
// and the constraint constructors (Enum, Minimum, ListMap, …) that
// kube.TypeRules, kube.FieldOf and kube.ValuesOf hold; ResolveFields and
// ResolveColumns, which turn field pointers into field indexes and JSON
// paths; CEL, which kube.CEL converts to; and StatusFields and
// DefaultStatus, the reflection side of kube's StatusConventions: where a
// Status type holds conditions and observedGeneration, and the CRD's status
// default.
//
// Its invariants:
//
//   - The schema is the encoding: a property for each field encoding/json
//     writes (by its typeFields rules), required and nullable as
//     encoding/json may leave it out or write null, so that every object a
//     Go value encodes to is one the API server accepts and round-trips.
//   - A field is named by its offset and type, never by a string, so a
//     rule or a column that names no field is an error, not a silent no-op;
//     a resolved Rules keeps no pointer into the user's value.
//   - Kubernetes' own types (k8s.io/api, apimachinery's meta/v1) carry what
//     the API server's own /openapi/v3 says of them (package upstream's
//     table), with the user's rules on top.
//   - Every mistake is collected and returned as one error (errors.Join),
//     with a nil CRD; nothing here panics on a user's type or value (a
//     panicking MarshalJSON is an error).
//   - A CRD it returns is one the API server's own
//     ValidateCustomResourceDefinition accepts; what CRD can check of that
//     without the API server's packages (names, formats, constraints no
//     value can pass, defaults its own schema refuses) it checks.
//
// It holds no state between calls: each CRD call makes its own reflector.
package crdschema
