// Package upstream holds the API server's own schema for the Kubernetes
// types a custom resource embeds (corev1.PodTemplateSpec, Container,
// metav1.LabelSelector, …): a table trimmed from the OpenAPI v3 documents
// that the kube-apiserver of the k8s.io/api release in go.mod serves at
// /openapi/v3, embedded in types.json.gz.
//
// The table keeps, for each object type, what a CRD's structural schema
// can carry and reflection of the Go type can't know: descriptions, the
// required fields, x-kubernetes-list-type, x-kubernetes-list-map-keys and
// x-kubernetes-map-type, formats, enums and the defaults of +default
// markers. go
// generate in the kube module rewrites it from a running API server (see
// ../controlplanetests/cmd/upstreamgen), and a test under the controlplane
// build tag (../controlplanetests/upstream) fails when it differs from what
// the API server serves.
package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

//go:embed types.json.gz
var table []byte

// GroupVersions are the paths of the /openapi/v3 documents the table is
// made from: the API groups whose types an operator's custom resource
// embeds. Each document carries every type its own types refer to, so
// metav1's (LabelSelector, Condition, …) and resource.Quantity come with
// them.
func GroupVersions() []string {
	return []string{
		"api/v1",
		"apis/apps/v1",
		"apis/autoscaling/v2",
		"apis/batch/v1",
		"apis/networking.k8s.io/v1",
		"apis/policy/v1",
		"apis/rbac.authorization.k8s.io/v1",
		"apis/storage.k8s.io/v1",
	}
}

// Type is the schema of one object type, trimmed to what a CRD uses.
type Type struct {
	Description string              `json:"description,omitempty"`
	Required    []string            `json:"required,omitempty"`
	MapType     string              `json:"x-kubernetes-map-type,omitempty"`
	Properties  map[string]Property `json:"properties,omitempty"`
}

// Property is the schema of one field of a Type, trimmed to what a CRD
// uses and reflection doesn't know.
//
// Default is a +default marker's value, and the zero value that openapi-gen
// writes for a non-pointer field, as Go's decoding would leave it, only
// where the field isn't required and is a scalar: on a required field a
// default would fill a missing field in and so defeat required, and a {}
// on a struct field would write {} into every object that leaves it out.
// The scalar ones are kept because a list-map key needs one where it isn't
// required (LocalObjectReference's name, in a pod's imagePullSecrets).
type Property struct {
	Description string            `json:"description,omitempty"`
	Format      string            `json:"format,omitempty"`
	Default     json.RawMessage   `json:"default,omitempty"`
	Enum        []json.RawMessage `json:"enum,omitempty"`
	ListType    string            `json:"x-kubernetes-list-type,omitempty"`
	ListMapKeys []string          `json:"x-kubernetes-list-map-keys,omitempty"`
	MapType     string            `json:"x-kubernetes-map-type,omitempty"`
}

// Table is the embedded table: each Type by its OpenAPI definition name,
// such as io.k8s.api.core.v1.Container (see Name). The map is new on each
// call, the caller's to keep.
func Table() (map[string]Type, error) {
	return Decode(table)
}

// Embedded is the embedded table as Generate wrote it: gzipped JSON. The
// bytes are a copy.
func Embedded() []byte {
	return bytes.Clone(table)
}

// Decode decodes a table that Generate made.
func Decode(b []byte) (map[string]Type, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("upstream: the table: %w", err)
	}
	var types map[string]Type
	if err := json.NewDecoder(zr).Decode(&types); err != nil {
		return nil, fmt.Errorf("upstream: the table: %w", err)
	}
	return types, nil
}

// Name is the OpenAPI definition name of the Go type named name in package
// pkgPath, as Kubernetes' openapi-gen names it: io.k8s.api.core.v1.Container
// for k8s.io/api/core/v1's Container. It is "" for a package outside
// k8s.io, which the table has no types of.
func Name(pkgPath, name string) string {
	rest, ok := strings.CutPrefix(pkgPath, "k8s.io/")
	if !ok || name == "" {
		return ""
	}
	return "io.k8s." + strings.ReplaceAll(rest, "/", ".") + "." + name
}

// Fetch gets the /openapi/v3 document of each of GroupVersions from the
// API server of cfg, by the path the server's index names it with
// (api/v1, apis/apps/v1, …). It returns an error naming every group
// version the server doesn't serve.
func Fetch(ctx context.Context, cfg *rest.Config) (map[string][]byte, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		return nil, fmt.Errorf("upstream: the /openapi/v3 index: %w", err)
	}
	docs := make(map[string][]byte, len(GroupVersions()))
	var errs []error
	for _, gv := range GroupVersions() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, ok := paths[gv]
		if !ok {
			errs = append(errs, fmt.Errorf("upstream: the API server serves no /openapi/v3/%s", gv))
			continue
		}
		b, err := p.Schema("application/json")
		if err != nil {
			errs = append(errs, fmt.Errorf("upstream: /openapi/v3/%s: %w", gv, err))
			continue
		}
		docs[gv] = b
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return docs, nil
}

// openAPISchema is the part of an OpenAPI v3 schema that Generate reads.
type openAPISchema struct {
	Description string                   `json:"description"`
	Type        string                   `json:"type"`
	Format      string                   `json:"format"`
	Default     json.RawMessage          `json:"default"`
	Enum        []json.RawMessage        `json:"enum"`
	Required    []string                 `json:"required"`
	Properties  map[string]openAPISchema `json:"properties"`
	ListType    string                   `json:"x-kubernetes-list-type"`
	ListMapKeys []string                 `json:"x-kubernetes-list-map-keys"`
	MapType     string                   `json:"x-kubernetes-map-type"`
}

// Generate makes the table from OpenAPI v3 documents, by the path each was
// fetched from (as Fetch returns them): every object type with properties,
// trimmed to a Type, gzipped JSON. Its output is the same for the same
// documents. A type that two documents describe differently is an error.
func Generate(docs map[string][]byte) ([]byte, error) {
	types := map[string]Type{}
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(docs)) {
		var doc struct {
			Components struct {
				Schemas map[string]openAPISchema `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(docs[path], &doc); err != nil {
			errs = append(errs, fmt.Errorf("upstream: %s: %w", path, err))
			continue
		}
		for name, s := range doc.Components.Schemas {
			if s.Type != "object" || len(s.Properties) == 0 {
				continue
			}
			t := trim(s)
			if old, ok := types[name]; ok {
				a, _ := json.Marshal(old)
				b, _ := json.Marshal(t)
				if !bytes.Equal(a, b) {
					errs = append(errs, fmt.Errorf("upstream: %s: %s differs from its schema in another document", path, name))
				}
				continue
			}
			types[name] = t
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level
	enc := json.NewEncoder(zw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(types); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return buf.Bytes(), nil
}

func trim(s openAPISchema) Type {
	t := Type{
		Description: s.Description,
		Required:    s.Required,
		MapType:     s.MapType,
		Properties:  make(map[string]Property, len(s.Properties)),
	}
	for name, p := range s.Properties {
		var def json.RawMessage
		if len(p.Default) > 0 && keepDefault(p.Default, slices.Contains(s.Required, name)) {
			def = p.Default
		}
		t.Properties[name] = Property{
			Description: p.Description,
			Format:      p.Format,
			Default:     def,
			Enum:        p.Enum,
			ListType:    p.ListType,
			ListMapKeys: p.ListMapKeys,
			MapType:     p.MapType,
		}
	}
	return t
}

// keepDefault reports whether the table keeps default value v of a field
// (see Property): a value other than a zero one, and a zero scalar ("", 0,
// false) of a field that isn't required.
func keepDefault(v json.RawMessage, required bool) bool {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return false
	}
	switch x := x.(type) {
	case string:
		return x != "" || !required
	case float64:
		return x != 0 || !required
	case bool:
		return x || !required
	case map[string]any:
		return len(x) > 0
	case []any:
		return len(x) > 0
	}
	return false
}

// Diff names each type that two tables, as Generate makes them, hold
// differently, or that one of them lacks, in order; it is empty when they
// are the same.
func Diff(a, b []byte) ([]string, error) {
	ta, err := Decode(a)
	if err != nil {
		return nil, err
	}
	tb, err := Decode(b)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, name := range slices.Sorted(maps.Keys(ta)) {
		y, ok := tb[name]
		if !ok {
			diffs = append(diffs, name+": only in the first")
			continue
		}
		ja, _ := json.Marshal(ta[name])
		jb, _ := json.Marshal(y)
		if !bytes.Equal(ja, jb) {
			diffs = append(diffs, name+": differs")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tb)) {
		if _, ok := ta[name]; !ok {
			diffs = append(diffs, name+": only in the second")
		}
	}
	return diffs, nil
}
