package kube

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// RBAC is a controller's Roles and ClusterRole as plain values: what
// Controller.RBAC returns, the rules a Controller needs for its own
// requests, for the user to add the Reconciler's own to (Add) and write
// as YAML (YAML), as controller-gen writes a role.yaml from
// +kubebuilder:rbac markers.
type RBAC struct {
	// Name names the ClusterRole, each Role and their bindings:
	// Settings.Name for Controller.RBAC.
	Name string
	// ClusterRole holds the rules in every namespace and on
	// cluster-scoped resources; nil when there are none.
	ClusterRole *rbacv1.ClusterRole
	// Roles hold the rules in one namespace each, sorted by namespace,
	// then name: Add's, named Name, and Controller.RBAC's Role of the
	// Lease, named Name-leader-election, as kubebuilder's scaffold has
	// its leader-election-role.
	Roles []rbacv1.Role
}

// Add adds rules to r: to its ClusterRole when namespace is "", else to
// its Role named r.Name in namespace, either made if r has none. The
// rules are then merged and sorted as controller-gen writes them: one
// rule a set of API groups, resource and resource names (or non-resource
// URLs), with the union of their verbs, sorted; then the resources of
// rules alike but for them, in one rule; the rules sorted by their
// groups, resources, resource names and URLs. A rule with no verbs, or
// with neither resources nor non-resource URLs, is kept as it is, last:
// the API server refuses it when the role is applied, naming it.
func (r *RBAC) Add(namespace string, rules ...rbacv1.PolicyRule) {
	r.add(r.Name, namespace, rules...)
}

// add adds rules to r's ClusterRole, or its Role name in namespace.
func (r *RBAC) add(name, namespace string, rules ...rbacv1.PolicyRule) {
	if namespace == "" {
		if r.ClusterRole == nil {
			r.ClusterRole = &rbacv1.ClusterRole{
				TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
			}
		}
		r.ClusterRole.Rules = normalizeRules(append(slices.Clone(r.ClusterRole.Rules), rules...))
		return
	}
	is := func(role rbacv1.Role) bool { return role.Namespace == namespace && role.Name == name }
	if !slices.ContainsFunc(r.Roles, is) {
		r.Roles = append(r.Roles, rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		})
		slices.SortStableFunc(r.Roles, func(a, b rbacv1.Role) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
	}
	i := slices.IndexFunc(r.Roles, is)
	r.Roles[i].Rules = normalizeRules(append(slices.Clone(r.Roles[i].Rules), rules...))
}

// YAML is r as YAML, as a user checks it into their repository and
// applies it: the ClusterRole, then each Role, in r.Roles' order, each
// followed by its binding (a ClusterRoleBinding or RoleBinding of the
// same name) to the ServiceAccount serviceAccount of namespace
// saNamespace, unless serviceAccount is "", as sigs.k8s.io/yaml writes
// them (keys sorted), with their apiVersion and kind, separated by "---"
// lines, without the creationTimestamp an unset ObjectMeta would write. It returns an error
// only if an object doesn't encode.
func (r RBAC) YAML(saNamespace, serviceAccount string) ([]byte, error) {
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: saNamespace}}
	var objs []any
	if r.ClusterRole != nil {
		cr := *r.ClusterRole
		cr.TypeMeta = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"}
		objs = append(objs, &cr)
		if serviceAccount != "" {
			objs = append(objs, &rbacv1.ClusterRoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: r.ClusterRole.Name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.ClusterRole.Name},
				Subjects:   subjects,
			})
		}
	}
	for _, role := range r.Roles {
		role.TypeMeta = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"}
		objs = append(objs, &role)
		if serviceAccount != "" {
			objs = append(objs, &rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects:   subjects,
			})
		}
	}
	var out []byte
	for i, o := range objs {
		b, err := objectYAML(o)
		if err != nil {
			return nil, fmt.Errorf("kube: the RBAC of %s: %w", r.Name, err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

// objectYAML is o as YAML, without metadata.creationTimestamp, which an
// unset ObjectMeta writes as null.
func objectYAML(o any) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	if md, ok := fields["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if b, err = json.Marshal(fields); err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(b)
}

// normalizeRules merges and sorts rules as controller-gen's rbac
// generator does (see RBAC.Add).
func normalizeRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	sorted := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	join := func(s []string) string { return strings.Join(s, "&") }
	// One rule a set of groups, resources, names and URLs: controller-gen
	// splits a marker's resources into a rule each before it merges.
	type key struct{ groups, resources, names, urls string }
	byKey := map[key]*rbacv1.PolicyRule{}
	var keys []key
	var kept []rbacv1.PolicyRule
	add := func(r rbacv1.PolicyRule) {
		k := key{join(r.APIGroups), join(r.Resources), join(r.ResourceNames), join(r.NonResourceURLs)}
		if got, ok := byKey[k]; ok {
			got.Verbs = sorted(append(got.Verbs, r.Verbs...))
			return
		}
		byKey[k] = &r
		keys = append(keys, k)
	}
	for _, r := range rules {
		if len(r.Verbs) == 0 || len(r.Resources)+len(r.NonResourceURLs) == 0 {
			kept = append(kept, r)
			continue
		}
		r.APIGroups, r.ResourceNames, r.NonResourceURLs, r.Verbs = sorted(r.APIGroups), sorted(r.ResourceNames), sorted(r.NonResourceURLs), sorted(r.Verbs)
		if len(r.Resources) == 0 {
			add(r)
			continue
		}
		for _, res := range sorted(r.Resources) {
			one := r
			one.Resources = []string{res}
			add(one)
		}
	}
	// Then the resources of rules alike in all else, in one rule.
	type without struct{ groups, names, urls, verbs string }
	merged := map[without]*rbacv1.PolicyRule{}
	var out []rbacv1.PolicyRule
	var order []without
	for _, k := range keys {
		r := byKey[k]
		w := without{k.groups, k.names, k.urls, join(r.Verbs)}
		if m, ok := merged[w]; ok && len(r.Resources) > 0 && len(m.Resources) > 0 {
			m.Resources = sorted(append(m.Resources, r.Resources...))
			continue
		}
		if _, ok := merged[w]; !ok {
			merged[w] = r
			order = append(order, w)
			continue
		}
		out = append(out, *r)
	}
	for _, w := range order {
		out = append(out, *merged[w])
	}
	slices.SortStableFunc(out, func(a, b rbacv1.PolicyRule) int {
		return strings.Compare(ruleKey(a), ruleKey(b))
	})
	return append(out, kept...)
}

// ruleKey is the key controller-gen sorts rules by.
func ruleKey(r rbacv1.PolicyRule) string {
	return strings.Join(r.APIGroups, "&") + " + " + strings.Join(r.Resources, "&") + " + " +
		strings.Join(r.ResourceNames, "&") + " + " + strings.Join(r.NonResourceURLs, "&")
}

// The groups and resources of the Controller's own requests beside its
// resource's.
const (
	leasesGroup = "coordination.k8s.io"
	eventsGroup = "events.k8s.io"
	crdsGroup   = "apiextensions.k8s.io"
)

// RBAC returns the ClusterRole and Roles, named Settings.Name, whose rules
// let c make every request of its own, and no more (verbs as RBAC names
// them; server-side apply is a patch):
//
//   - its resource: list and watch (Serve's first list and its informer);
//     patch, with a Finalize (the finalizer's applies), an Owns that
//     prunes (the ApplySet parent's label and annotations, applied) or
//     Settings.MigrateStorage (the no-op merge patch of each object); and,
//     for a Resource, patch on its status subresource (the status apply);
//   - each Owns: list and watch; get, with Prune or PruneDryRun (the fresh
//     read of a child before it is pruned), and delete, with Prune; and,
//     with any Owns, update on the resource's finalizers subresource,
//     which an API server with the OwnerReferencesPermissionEnforcement
//     admission plugin checks when a child's owner reference sets
//     blockOwnerDeletion, as ControllerReference's does;
//   - each Watches: list and watch;
//   - with Sharding.CacheShare, patch on the resource and on each Owns:
//     a member writes the label ShardLabel(Settings.Name) with a merge
//     patch through the metadata client, on an object created without
//     it and on one whose key moves at a view change; its informers of
//     the objects awaiting a label list and watch them through the
//     metadata client, which the list and watch above allow (RBAC
//     doesn't tell the metadata client's requests from others');
//   - Events: create and patch on events.k8s.io events (an Event, then its
//     series), in the objects' namespace, "default" for a cluster-scoped
//     resource's (events.go);
//   - the Lease: get, create and update on coordination.k8s.io leases in
//     LeaderElection.Namespace (client-go's Lease lock); with Sharding,
//     list, watch and delete too (the members' Leases, an informer on
//     them, a member's Lease deleted as it leaves or expires);
//   - with Settings.MigrateStorage, get and update on
//     customresourcedefinitions/status of apiextensions.k8s.io, named
//     plural.group (the CRD's status.storedVersions).
//
// The rules on objects go in the ClusterRole, or, with
// Settings.Namespace, in the Role of that namespace; the Lease's in the
// Role Settings.Name-leader-election of LeaderElection.Namespace; a
// cluster-scoped resource's Events in the Role of "default";
// MigrateStorage's in the ClusterRole. Discovery
// (the pruned resources' kinds, for the ApplySet) needs no rule: every
// authenticated user may read it (the system:discovery ClusterRole).
//
// The Reconciler's own requests are the user's to add, with Add: a
// create and a patch of each kind it applies, say (an apply that
// creates is checked for create too), and get on what it reads outside
// the caches. A webhookcert.Certs' rules are its own, too (package
// kube/webhookcert). See "The RBAC a Controller needs" in
// docs/writing-a-kubernetes-controller.md.
func (c *Controller) RBAC() RBAC {
	s := c.settings
	r := RBAC{Name: s.Name}
	rule := func(group, resource string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
	}
	objects := []rbacv1.PolicyRule{rule(c.gvr.Group, c.gvr.Resource, "list", "watch")}
	if c.finalizer != "" || c.prunes() || s.MigrateStorage || s.Sharding.CacheShare {
		objects = append(objects, rule(c.gvr.Group, c.gvr.Resource, "patch"))
	}
	if c.status {
		objects = append(objects, rule(c.gvr.Group, c.gvr.Resource+"/status", "patch"))
	}
	if len(c.owns) > 0 {
		objects = append(objects, rule(c.gvr.Group, c.gvr.Resource+"/finalizers", "update"))
	}
	for _, o := range c.owns {
		verbs := []string{"list", "watch"}
		switch o.prune {
		case pruneDelete:
			verbs = append(verbs, "get", "delete")
		case pruneDryRun:
			verbs = append(verbs, "get")
		}
		if s.Sharding.CacheShare {
			verbs = append(verbs, "patch")
		}
		objects = append(objects, rule(o.gvr.Group, o.gvr.Resource, verbs...))
	}
	for _, w := range c.watches {
		objects = append(objects, rule(w.gvr.Group, w.gvr.Resource, "list", "watch"))
	}
	events := rule(eventsGroup, "events", "create", "patch")
	if c.scope == Cluster {
		r.Add("default", events)
	} else {
		objects = append(objects, events)
	}
	r.Add(s.Namespace, objects...)

	leases := rule(leasesGroup, "leases", "get", "create", "update")
	if s.Sharding.Enabled {
		leases.Verbs = append(leases.Verbs, "list", "watch", "delete")
	}
	r.add(s.Name+"-leader-election", s.LeaderElection.Namespace, leases)
	if s.MigrateStorage {
		crd := rule(crdsGroup, "customresourcedefinitions/status", "get", "update")
		crd.ResourceNames = []string{c.gvr.Resource + "." + c.gvr.Group}
		r.Add("", crd)
	}
	return r
}
