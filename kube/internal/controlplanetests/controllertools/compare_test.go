package controllertools_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// goldenPath is controller-gen's CRD of the fixture, copied from
// controller-tools (see the file's header for its commit and license).
const goldenPath = "../../../testdata/controller-tools/testdata.kubebuilder.io_cronjobs.yaml"

// difference is one way a node of kube's schema differs from the golden
// one: a keyword whose values differ, or a node only one of them has
// (keyword "" then).
type difference struct {
	path    string // JSON path of the node, such as .spec.hosts.items
	keyword string // such as minLength, or "" for a missing or extra node
	golden  any
	kube    any
}

func (d difference) String() string {
	if d.keyword == "" {
		return fmt.Sprintf("%s: golden %s, kube %s", d.path, presence(d.golden), presence(d.kube))
	}
	return fmt.Sprintf("%s: %s: golden %s, kube %s", d.path, d.keyword, show(d.golden), show(d.kube))
}

func presence(v any) string {
	if v == nil {
		return "has no such node"
	}
	return "has it"
}

func show(v any) string {
	if v == nil {
		return "(none)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// comparison is the node-by-node comparison of two schemas.
type comparison struct {
	nodes, matched int // the golden schema's nodes, and those kube has exactly
	diffs          []difference
}

// children are the keywords that hold schema nodes, compared node by node.
var children = []string{"properties", "items", "additionalProperties"}

// compareSchemas compares kube's schema to the golden one node by node,
// descriptions aside. A node is a schema: the root, a property, items or
// additionalProperties. It matches if every keyword other than those
// holding nodes has the same value; required and x-kubernetes-validations
// compare as sets, as their order means nothing to the API server.
func compareSchemas(golden, kube apiextensionsv1.JSONSchemaProps) comparison {
	var c comparison
	c.walk("", toNode(golden), toNode(kube))
	return c
}

func toNode(s apiextensionsv1.JSONSchemaProps) map[string]any {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// count is the number of nodes in n.
func count(n map[string]any) int {
	total := 1
	forChildren(n, func(_ string, c map[string]any) { total += count(c) })
	return total
}

// forChildren calls f with each node n holds, by its path below n.
func forChildren(n map[string]any, f func(suffix string, c map[string]any)) {
	if props, ok := n["properties"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(props)) {
			if c, ok := props[name].(map[string]any); ok {
				f("."+name, c)
			}
		}
	}
	if c, ok := n["items"].(map[string]any); ok {
		f(".items", c)
	}
	if c, ok := n["additionalProperties"].(map[string]any); ok {
		f(".additionalProperties", c)
	}
}

func (c *comparison) walk(path string, g, k map[string]any) {
	switch {
	case g == nil && k == nil:
		return
	case g == nil:
		c.diffs = append(c.diffs, difference{path: path, kube: k})
		return
	case k == nil:
		c.nodes += count(g)
		c.diffs = append(c.diffs, difference{path: path, golden: g})
		return
	}
	c.nodes++
	keys := map[string]bool{}
	for key := range g {
		keys[key] = true
	}
	for key := range k {
		keys[key] = true
	}
	same := true
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		if key == "description" || slices.Contains(children, key) && key != "additionalProperties" {
			continue
		}
		gv, kv := g[key], k[key]
		if key == "additionalProperties" {
			// A schema there is a node; only a bool is a keyword's value.
			if _, ok := gv.(map[string]any); ok {
				gv = nil
			}
			if _, ok := kv.(map[string]any); ok {
				kv = nil
			}
		}
		if key == "required" || key == "x-kubernetes-validations" {
			gv, kv = sorted(gv), sorted(kv)
		}
		if !reflect.DeepEqual(gv, kv) {
			same = false
			c.diffs = append(c.diffs, difference{path: path, keyword: key, golden: gv, kube: kv})
		}
	}
	if same {
		c.matched++
	}
	gc, kc := map[string]map[string]any{}, map[string]map[string]any{}
	forChildren(g, func(s string, n map[string]any) { gc[s] = n })
	forChildren(k, func(s string, n map[string]any) { kc[s] = n })
	suffixes := map[string]bool{}
	for s := range gc {
		suffixes[s] = true
	}
	for s := range kc {
		suffixes[s] = true
	}
	for _, s := range slices.Sorted(maps.Keys(suffixes)) {
		c.walk(path+s, gc[s], kc[s])
	}
}

// sorted is a list's items sorted by their JSON, for a comparison as sets.
func sorted(v any) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	l = slices.Clone(l)
	slices.SortFunc(l, func(a, b any) int { return strings.Compare(show(a), show(b)) })
	return l
}

func (c comparison) percent() float64 { return 100 * float64(c.matched) / float64(c.nodes) }

func goldenCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(b, &crd))
	return &crd
}

// TestCronJobSchemaMatchesControllerGens compares the CRD kube makes of
// controller-tools' CronJob fixture, its markers written as kube rules, with
// the one controller-gen makes, node by node, descriptions aside. It reports
// every difference by its JSON path, and fails on one that isn't a known
// difference, with its reason, in knownDifferences, or on a known one that
// no longer occurs.
func TestCronJobSchemaMatchesControllerGens(t *testing.T) {
	golden := goldenCRD(t)
	crd, err := CronJob.CRD()
	require.NoError(t, err)

	c := compareSchemas(*golden.Spec.Versions[0].Schema.OpenAPIV3Schema, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	t.Logf("%d of the golden schema's %d nodes match (%.1f%%), %d differences", c.matched, c.nodes, c.percent(), len(c.diffs))
	seen := make([]int, len(knownDifferences))
	for _, d := range c.diffs {
		i := slices.IndexFunc(knownDifferences, func(k known) bool { return k.match(d) })
		if i < 0 {
			t.Errorf("unknown difference: %s", d)
			continue
		}
		seen[i]++
		t.Logf("%s (%s)", d, knownDifferences[i].name)
	}
	for i, k := range knownDifferences {
		t.Logf("%d differences: %s: %s", seen[i], k.name, k.reason)
		if seen[i] == 0 {
			t.Errorf("known difference %q no longer occurs: remove it", k.name)
		}
	}
}

// known is a kind of difference between kube's schema and controller-gen's,
// and why it is there: a version skew of k8s.io/api, a deliberate design
// choice of kube's, or a documented gap.
type known struct {
	name   string
	reason string
	match  func(d difference) bool
}

const jobTemplate = ".spec.jobTemplate"

func under(d difference, prefix string) bool { return strings.HasPrefix(d.path, prefix) }

// knownDifferences are every difference the comparison may find, each
// with its reason. The test fails on any other.
var knownDifferences = []known{
	{
		name:   "k8s.io/api version skew",
		reason: "fields Kubernetes added after the fixture's k8s.io/api v0.36.1: kube's table is of go.mod's v0.37.2",
		match: func(d difference) bool {
			return under(d, jobTemplate) && d.keyword == "" && d.golden == nil
		},
	},
	{
		name: "upstream defaults",
		reason: "kube gives Kubernetes' own types the +default values the API server's own OpenAPI schema has; controller-gen " +
			"leaves out those written as a reference to a constant (+default=ref(...)), such as azureDisk's cachingMode, " +
			"and openapi-gen's zero default of a condition's status. (Both leave out the enums of +enum types.)",
		match: func(d difference) bool {
			return under(d, jobTemplate) && d.keyword == "default" && d.golden == nil
		},
	},
	{
		name: "upstream map types",
		reason: "controller-gen makes a struct that embeds an atomic one (LocalObjectReference) atomic too; the API server's " +
			"own OpenAPI schema, which kube follows, doesn't, so server-side apply merges these as the API server does",
		match: func(d difference) bool {
			return under(d, jobTemplate) && d.keyword == "x-kubernetes-map-type" && d.kube == nil
		},
	},
	{
		name: "ObjectMeta in a template",
		reason: "a metav1.ObjectMeta below the root keeps its fields (x-kubernetes-preserve-unknown-fields), where controller-gen's " +
			"bare type: object makes the API server prune a template's labels and annotations (see CRD's doc)",
		match: func(d difference) bool {
			return strings.HasSuffix(d.path, ".metadata") && d.keyword == "x-kubernetes-preserve-unknown-fields"
		},
	},
	{
		name: "nullable",
		reason: "kube makes nullable a field encoding/json may write as null (a nil pointer, slice or map without omitempty, " +
			"a zero metav1.Time or RawExtension), so a Go client's object isn't refused; controller-gen only with +nullable (see CRD's doc)",
		match: func(d difference) bool { return d.keyword == "nullable" && d.golden == nil && d.kube == true },
	},
	{
		name:   "format of int",
		reason: "kube gives Go's int the format int64, its range; controller-gen gives it none",
		match: func(d difference) bool {
			return d.keyword == "format" && d.golden == nil && d.kube == "int64"
		},
	},
	{
		name:   "required spec",
		reason: "kube's schema root requires spec; controller-gen's requires nothing",
		match:  func(d difference) bool { return d.path == "" && d.keyword == "required" },
	},
	{
		name: "a Default makes a field optional",
		reason: "kube makes a field with a Default optional, as the API server fills it in; controller-gen keeps it " +
			"required, which changes nothing on the API server, since defaulting runs first",
		match: func(d difference) bool {
			if d.path != ".spec" || d.keyword != "required" {
				return false
			}
			g, k := toStrings(d.golden), toStrings(d.kube)
			for _, name := range g {
				if !slices.Contains(k, name) && !strings.Contains(strings.ToLower(name), "defaulted") {
					return false
				}
			}
			return len(k) <= len(g) && !slices.ContainsFunc(k, func(n string) bool { return !slices.Contains(g, n) })
		},
	},
	{
		name: "a field's constraint over its type's",
		reason: "kube applies a type's ValueRules and then the field's own, the field's replacing the type's of the same kind; " +
			"controller-gen keeps both under allOf (and an alias of string has no rules of its own in Go); the values accepted here are the same",
		match: func(d difference) bool {
			return strings.HasPrefix(d.path, ".spec.fieldLevel") && slices.Contains([]string{"allOf", "minLength", "maxLength"}, d.keyword)
		},
	},
	{
		name: "title of an alias of string",
		reason: "StringAliasWithTitle is an alias of string (type X = string), which Go doesn't tell from string, so a rule " +
			"on it would be a rule on every string; its title goes on each field instead, as stringAliasWithAddedTitle's does",
		match: func(d difference) bool { return d.path == ".spec.stringAliasWithTitle" && d.keyword == "title" },
	},
	{
		name:   "explicit granular",
		reason: "+mapType=granular states the API server's default for a map; kube has no rule for it, as leaving it out means the same",
		match: func(d difference) bool {
			return d.keyword == "x-kubernetes-map-type" && d.golden == "granular" && d.kube == nil
		},
	},
	{
		name: "Schemaless",
		reason: "+kubebuilder:validation:Schemaless with Type=string drops a []byte's format: byte; kube has no field-level " +
			"schema replacement, and its base64 is what encoding/json writes (a named type with kube.Schema gives any schema)",
		match: func(d difference) bool { return d.path == ".spec.schemaless" && d.keyword == "format" },
	},
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
