package conversion

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Spoke is one version of a kind other than its hub, whose objects decode
// into a Go type of their own, with its conversions to and from the hub's
// Go type H. NewSpoke makes one.
type Spoke[H any] struct {
	version        string
	goType         string // the spoke's Go type, for messages
	made           bool   // made by NewSpoke, not a zero Spoke
	invalid        error  // made by InvalidSpoke: the mistake to name
	toNil, fromNil bool
	newObject      func() any
	toHub          convertFunc
	fromHub        convertFunc
}

// convertFunc converts src into dst, each a pointer to its version's Go
// type.
type convertFunc func(src, dst any) error

// NewSpoke returns the Spoke of version, whose objects are S's, converted
// to the hub's H by toHub and from it by fromHub: controller-runtime's
// Convertible's ConvertTo and ConvertFrom, as functions. The compiler
// checks that both take the same spoke and hub types, and Kind that H is
// its hub's.
//
// Each function fills dst from src, the whole object: its metadata too,
// copied unchanged (dst.ObjectMeta = src.ObjectMeta), since a conversion
// may change only the labels and annotations (see Handler). dst is new,
// its zero value. A returned error fails the ConversionReview, naming the
// object. Neither may be nil: Handler names a nil one as a missing
// direction.
func NewSpoke[S, H any](version string, toHub func(src *S, dst *H) error, fromHub func(src *H, dst *S) error) Spoke[H] {
	sp := Spoke[H]{
		version:   version,
		goType:    fmt.Sprintf("%T", new(S)),
		made:      true,
		toNil:     toHub == nil,
		fromNil:   fromHub == nil,
		newObject: func() any { return new(S) },
	}
	if toHub != nil {
		sp.toHub = func(src, dst any) error { return toHub(src.(*S), dst.(*H)) }
	}
	if fromHub != nil {
		sp.fromHub = func(src, dst any) error { return fromHub(src.(*H), dst.(*S)) }
	}
	return sp
}

// InvalidSpoke returns a Spoke that Handler and RoundTrip report as err,
// and no more: for a package that builds a Kind from declarations of its
// own, such as package kube's Resource.Versions, to name a mistake in
// them in its own terms (the declaration's place, and how to make it)
// rather than as a Spoke's. A nil err is reported as a zero Spoke.
func InvalidSpoke[H any](err error) Spoke[H] {
	return Spoke[H]{invalid: err}
}

// Kind declares the versions of one kind of a group, and how each
// converts: through its hub version, whose objects decode into H, as
// controller-runtime's hub and spoke (usually the storage version is the
// hub). An object is converted from one spoke to another through the hub,
// from a spoke to the hub with its toHub, and from the hub to a spoke with
// its fromHub.
type Kind[H any] struct {
	Group string // such as batch.tutorial.kubebuilder.io
	Kind  string // such as CronJob
	// Hub is the hub's version, such as v2.
	Hub string
	// Spokes are the other versions, each with its conversions.
	Spokes []Spoke[H]
}

// Registration is a Kind of any hub type, as Handler takes it. Only Kind
// implements it.
type Registration interface {
	compile() (*kind, error)
}

// kind is a Kind without its type parameter, as the Handler converts with
// it.
type kind struct {
	gk       schema.GroupKind
	hub      string
	hubType  string
	newHub   func() any
	spokes   map[string]*version
	versions []string // every version, the hub's first, for messages
}

type version struct {
	name      string
	goType    string
	newObject func() any
	toHub     convertFunc
	fromHub   convertFunc
}

// compile returns k as Handler converts with it, and an error naming every
// mistake in it.
func (k Kind[H]) compile() (*kind, error) {
	gk := schema.GroupKind{Group: k.Group, Kind: k.Kind}
	var errs []error
	if k.Group == "" {
		errs = append(errs, errors.New("Group is empty"))
	}
	if k.Kind == "" {
		errs = append(errs, errors.New("Kind is empty"))
	}
	if k.Hub == "" {
		errs = append(errs, errors.New("Hub is empty: name the hub's version, usually the storage version"))
	} else if msgs := validation.IsDNS1035Label(k.Hub); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("the hub version %q is not a version name, such as v1beta1: %s", k.Hub, msgs[0]))
	}
	out := &kind{
		gk:       gk,
		hub:      k.Hub,
		hubType:  fmt.Sprintf("%T", new(H)),
		newHub:   func() any { return new(H) },
		spokes:   make(map[string]*version, len(k.Spokes)),
		versions: []string{k.Hub},
	}
	for i, sp := range k.Spokes {
		if sp.invalid != nil {
			errs = append(errs, sp.invalid)
			continue
		}
		if !sp.made {
			errs = append(errs, fmt.Errorf("spoke %d is a zero Spoke: make it with NewSpoke", i))
			continue
		}
		switch {
		case sp.version == "":
			errs = append(errs, fmt.Errorf("spoke %d (%s) has no version", i, sp.goType))
			continue
		case sp.version == k.Hub:
			errs = append(errs, fmt.Errorf("version %s is both the hub and spoke %d (%s): two hubs, or a hub with conversions; the hub has none", sp.version, i, sp.goType))
			continue
		case out.spokes[sp.version] != nil:
			errs = append(errs, fmt.Errorf("version %s is spoke %d (%s) and an earlier spoke: each version is declared once", sp.version, i, sp.goType))
			continue
		}
		if msgs := validation.IsDNS1035Label(sp.version); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("spoke %d's version %q is not a version name, such as v1beta1: %s", i, sp.version, msgs[0]))
		}
		if sp.toNil {
			errs = append(errs, fmt.Errorf("version %s (%s) has no conversion to the hub %s: its toHub is nil", sp.version, sp.goType, k.Hub))
		}
		if sp.fromNil {
			errs = append(errs, fmt.Errorf("version %s (%s) has no conversion from the hub %s: its fromHub is nil", sp.version, sp.goType, k.Hub))
		}
		out.spokes[sp.version] = &version{name: sp.version, goType: sp.goType, newObject: sp.newObject, toHub: sp.toHub, fromHub: sp.fromHub}
		out.versions = append(out.versions, sp.version)
	}
	if len(k.Spokes) == 0 {
		errs = append(errs, errors.New("no spoke: a kind of one version needs no conversion"))
	}
	return out, errors.Join(errs...)
}

// prefixed returns err with each of its joined errors prefixed.
func prefixed(prefix string, err error) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			errs = append(errs, fmt.Errorf("%s%w", prefix, e))
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// compileAll returns the kinds by GroupKind, or an error naming every
// mistake in them, such as one kind registered twice.
func compileAll(regs []Registration) (map[schema.GroupKind]*kind, error) {
	var errs []error
	kinds := make(map[schema.GroupKind]*kind, len(regs))
	if len(regs) == 0 {
		errs = append(errs, errors.New("conversion: Handler was given no Kind"))
	}
	for i, r := range regs {
		if r == nil {
			errs = append(errs, fmt.Errorf("conversion: Kind %d is nil", i))
			continue
		}
		k, err := r.compile()
		if err != nil {
			label := fmt.Sprintf("conversion: Kind %d (%s): ", i, k.gk)
			if k.gk.Empty() {
				label = fmt.Sprintf("conversion: Kind %d: ", i)
			}
			errs = append(errs, prefixed(label, err))
		}
		if prev := kinds[k.gk]; prev != nil {
			if prev.hub != k.hub {
				errs = append(errs, fmt.Errorf("conversion: Kind %d (%s) is registered twice, with two hubs, %s and %s: a kind has one hub, and is registered once", i, k.gk, prev.hub, k.hub))
			} else {
				errs = append(errs, fmt.Errorf("conversion: Kind %d (%s) is registered twice: register it once, with all its versions", i, k.gk))
			}
			continue
		}
		kinds[k.gk] = k
	}
	return kinds, errors.Join(errs...)
}

// version returns the named version of k, or nil for its hub; ok is false
// when k has no such version.
func (k *kind) version(name string) (v *version, ok bool) {
	if name == k.hub {
		return nil, true
	}
	v, ok = k.spokes[name]
	return v, ok
}

// newObject returns a new object of the named version, a pointer to its Go
// type.
func (k *kind) newObject(v *version) any {
	if v == nil {
		return k.newHub()
	}
	return v.newObject()
}

// goType names the Go type of version v (nil for the hub).
func (k *kind) goType(v *version) string {
	if v == nil {
		return k.hubType
	}
	return v.goType
}

// known names k's versions, for an error.
func (k *kind) known() string {
	vs := slices.Clone(k.versions[1:])
	slices.Sort(vs)
	return fmt.Sprintf("%s (the hub) and %v", k.hub, vs)
}
