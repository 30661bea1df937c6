package kube

// TypeRules constrain the fields of one Go type, wherever the type appears
// in a schema.
type TypeRules struct{}
