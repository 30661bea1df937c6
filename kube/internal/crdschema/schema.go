package crdschema

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	durationType    = reflect.TypeFor[metav1.Duration]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	rawType         = reflect.TypeFor[runtime.RawExtension]()
	objectMetaType  = reflect.TypeFor[metav1.ObjectMeta]()
	conditionType   = reflect.TypeFor[metav1.Condition]()
)

// reflector reflects Go types into one structural schema, constrained by
// a Resource's Rules. It collects every mistake it finds, rather than
// stopping at the first.
type reflector struct {
	rules    map[reflect.Type]*Rules
	used     map[reflect.Type]bool
	visiting map[reflect.Type]bool
	reported map[string]bool
	errs     []error
	upstream upstreamTable

	// omitUpstreamDescriptions is Resource.OmitUpstreamDescriptions.
	omitUpstreamDescriptions bool
	// embeddedObjectMeta is Resource.EmbeddedObjectMeta.
	embeddedObjectMeta bool
}

func newReflector(rules []Rules) *reflector {
	b := &reflector{
		rules:    make(map[reflect.Type]*Rules, len(rules)),
		used:     make(map[reflect.Type]bool, len(rules)),
		visiting: make(map[reflect.Type]bool),
		reported: make(map[string]bool),
	}
	for i := range rules {
		r := &rules[i]
		b.errs = append(b.errs, r.Errs...)
		if r.Type == nil {
			b.errs = append(b.errs, fmt.Errorf("kube: Rules[%d] is a zero TypeRules, which names no type: make it with Rules or Schema", i))
			continue
		}
		if _, ok := b.rules[r.Type]; ok {
			b.errs = append(b.errs, fmt.Errorf("kube: two Rules for %s: a type has one Rules, or one Schema", r.Type))
			continue
		}
		b.rules[r.Type] = r
	}
	return b
}

// report adds err once for key, so a type that appears in many places is
// reported once.
func (b *reflector) report(key string, err error) {
	if b.reported[key] {
		return
	}
	b.reported[key] = true
	b.errs = append(b.errs, err)
}

// finish reports the Rules of types that appear nowhere, and the rules on
// fields that aren't encoded, and returns every error found.
func (b *reflector) finish() error {
	types := make([]reflect.Type, 0, len(b.rules))
	for t := range b.rules {
		types = append(types, t)
	}
	slices.SortFunc(types, func(a, b reflect.Type) int { return strings.Compare(a.String(), b.String()) })
	for _, t := range types {
		r := b.rules[t]
		if !b.used[t] {
			b.errs = append(b.errs, fmt.Errorf("kube: Rules for %s: %s appears nowhere in Spec or Status", t, t))
			continue
		}
		if len(r.Fields) == 0 || t.Kind() != reflect.Struct {
			continue
		}
		fields, _ := jsonFields(t)
		for _, f := range r.Fields {
			if !slices.ContainsFunc(fields, func(jf jsonField) bool { return slices.Equal(jf.index, f.Index) }) {
				b.errs = append(b.errs, fmt.Errorf("kube: Rules for %s: field %s isn't encoded (it is unexported, tagged json:\"-\", or hidden by another field of its name), so it has no schema to constrain", t, goFieldName(t, f.Index)))
			}
		}
	}
	return joinErrs(b.errs)
}

// schema is t's schema, at path.
func (b *reflector) schema(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	r := b.rules[t]
	if r != nil {
		b.used[t] = true
	}
	var s apiextensionsv1.JSONSchemaProps
	if r != nil && r.Schema != nil {
		s = *r.Schema.DeepCopy()
	} else {
		s = b.reflect(t, path)
	}
	if r != nil {
		if r.Description != nil {
			s.Description = *r.Description
		}
		s.XValidations = append(s.XValidations, r.Validations...)
		for i, c := range r.Values {
			if err := applyConstraint(c, &s); err != nil {
				b.report(fmt.Sprintf("values %s %d", t, i), fmt.Errorf("kube: %s: ValueRules for %s: %s %w", path, t, c.Name, err))
			}
		}
		if len(r.Values) > 0 {
			for _, err := range consistent(&s) {
				b.report("consistent "+t.String()+err.Error(), fmt.Errorf("kube: %s: ValueRules for %s: %w", path, t, err))
			}
		}
	}
	return s
}

// constrained reports whether t's ValueRules constrain its values.
func (b *reflector) constrained(t reflect.Type) bool {
	r := b.rules[t]
	return r != nil && ConstrainsValue(r.Values)
}

// quantityPattern is the pattern of resource.Quantity's string form, as the
// API server's own types carry it (k8s.io/apimachinery's
// resource.Quantity OpenAPI definition, and controller-gen's).
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// reflect is t's schema, without its own type's rules.
func (b *reflector) reflect(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	if s, ok := b.wellKnown(t); ok {
		return s
	}
	if s, ok := b.encodedItself(t, path); ok {
		return s
	}
	return b.byKind(t, path)
}

// wellKnown is the schema of t if it is one of the API machinery's types
// whose JSON isn't what its fields say: times, durations, IntOrString,
// Quantity, RawExtension and ObjectMeta.
func (b *reflector) wellKnown(t reflect.Type) (apiextensionsv1.JSONSchemaProps, bool) {
	switch t {
	case timeType, microTimeType:
		return apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}, true
	case durationType:
		return apiextensionsv1.JSONSchemaProps{Type: "string"}, true
	case intOrStringType:
		return apiextensionsv1.JSONSchemaProps{
			XIntOrString: true,
			AnyOf:        []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
		}, true
	case quantityType:
		// A string that isn't a quantity would be admitted, and then fail
		// every decode of the object.
		return apiextensionsv1.JSONSchemaProps{
			XIntOrString: true,
			AnyOf:        []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
			Pattern:      quantityPattern,
		}, true
	case rawType:
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}, true
	case objectMetaType:
		if b.embeddedObjectMeta {
			return b.embeddedMeta(), true
		}
		// Not the spec's bare type: object, whose properties the API server
		// prunes, or rejects under fieldValidation=Strict: a template's
		// labels would be lost.
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}, true
	}
	return apiextensionsv1.JSONSchemaProps{}, false
}

// encodedItself is the schema of t if t, not a pointer, encodes itself: a
// json.Marshaler is a mistake, reported, since its fields aren't its
// encoding; an encoding.TextMarshaler is a string.
func (b *reflector) encodedItself(t reflect.Type, path string) (apiextensionsv1.JSONSchemaProps, bool) {
	if t.Kind() != reflect.Pointer && (t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType)) {
		b.report("marshaler "+t.String(), fmt.Errorf("kube: %s: %s implements json.Marshaler, so its fields aren't its encoding: give its schema with kube.Schema[%s], or give the field PreserveUnknownFields to keep any JSON value there", path, t, t))
		return apiextensionsv1.JSONSchemaProps{Type: "object"}, true
	}
	if t.Kind() != reflect.Pointer && (t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)) {
		// encoding/json encodes a TextMarshaler as a JSON string.
		return apiextensionsv1.JSONSchemaProps{Type: "string"}, true
	}
	return apiextensionsv1.JSONSchemaProps{}, false
}

// byKind is the schema of t by its kind, as encoding/json encodes it; a
// kind it can't encode is reported.
func (b *reflector) byKind(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	switch t.Kind() {
	case reflect.Bool:
		return apiextensionsv1.JSONSchemaProps{Type: "boolean"}
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	case reflect.Float32, reflect.Float64:
		return apiextensionsv1.JSONSchemaProps{Type: "number"}
	case reflect.String:
		return apiextensionsv1.JSONSchemaProps{Type: "string"}
	case reflect.Pointer:
		return b.element(t, path)
	case reflect.Slice, reflect.Array:
		return b.array(t, path)
	case reflect.Map:
		return b.mapOf(t, path)
	case reflect.Struct:
		if !b.enter(t, path) {
			return apiextensionsv1.JSONSchemaProps{Type: "object"}
		}
		defer b.leave(t)
		return b.object(t, path)
	case reflect.Interface:
		b.report("kind "+t.String(), fmt.Errorf("kube: %s: %s is an interface, whose encoding has no schema: give the field that holds it PreserveUnknownFields to keep any JSON value there, or use a concrete type", path, t))
	case reflect.Chan:
		b.report("kind "+t.String(), fmt.Errorf("kube: %s: %s is a channel, which encoding/json can't encode", path, t))
	case reflect.Func:
		b.report("kind "+t.String(), fmt.Errorf("kube: %s: %s is a function, which encoding/json can't encode", path, t))
	default:
		b.report("kind "+t.String(), fmt.Errorf("kube: %s: %s is a %s, which encoding/json can't encode", path, t, t.Kind()))
	}
	return apiextensionsv1.JSONSchemaProps{Type: "object"}
}

// array is the schema of slice or array type t: base64 for bytes, else an
// array of its elements' schema.
func (b *reflector) array(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		// As encoding/json: base64, unless the byte type encodes itself.
		p := reflect.PointerTo(t.Elem())
		if !p.Implements(marshalerType) && !p.Implements(textMarshalerType) {
			return apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"}
		}
	}
	if !b.enter(t, path) {
		return apiextensionsv1.JSONSchemaProps{Type: "array"}
	}
	defer b.leave(t)
	items := b.element(t.Elem(), path+"[*]")
	return apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &items}}
}

// mapOf is the schema of map type t: an object of its values' schema, if
// encoding/json can encode its keys.
func (b *reflector) mapOf(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	if !jsonKey(t.Key()) {
		b.report("map "+t.String(), fmt.Errorf("kube: %s: %s has keys of type %s, which encoding/json can't encode: a map's keys must be strings, integers, or implement encoding.TextMarshaler", path, t, t.Key()))
		return apiextensionsv1.JSONSchemaProps{Type: "object"}
	}
	if !b.enter(t, path) {
		return apiextensionsv1.JSONSchemaProps{Type: "object"}
	}
	defer b.leave(t)
	values := b.element(t.Elem(), path+"[*]")
	return apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &values}}
}

// embeddedMeta is the schema of a metav1.ObjectMeta below the root with
// Resource.EmbeddedObjectMeta, as controller-gen's
// crd:generateEmbeddedObjectMeta makes it: its name, namespace, labels,
// annotations and finalizers, described as the API server describes them,
// and no other field, which the API server prunes.
func (b *reflector) embeddedMeta() apiextensionsv1.JSONSchemaProps {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strs := func(s apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps { return &s }
	props := map[string]apiextensionsv1.JSONSchemaProps{
		"name":        str,
		"namespace":   str,
		"labels":      {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: strs(str)}},
		"annotations": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: strs(str)}},
		"finalizers":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: strs(str)}},
	}
	if u := b.upstreamType(objectMetaType); u != nil && !b.omitUpstreamDescriptions {
		for name, p := range props {
			p.Description = u.Properties[name].Description
			props[name] = p
		}
	}
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
}

// jsonKey reports whether encoding/json encodes a map key of type t: a
// string, an integer, or an encoding.TextMarshaler.
func jsonKey(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return t.Implements(textMarshalerType)
}

// opaque is the schema of a field given PreserveUnknownFields whose type
// has none of its own: any JSON value for an interface or a type that
// encodes itself with json.Marshaler and has no Schema, and any object for
// a map of interfaces.
func (b *reflector) opaque(t reflect.Type) (apiextensionsv1.JSONSchemaProps, bool) {
	keep := ptrTo(true)
	switch {
	case t.Kind() == reflect.Interface:
		return apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: keep}, true
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Interface && jsonKey(t.Key()):
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: keep}, true
	case b.rules[t] == nil && t != timeType && t != microTimeType && t != durationType && t != quantityType && t != intOrStringType && t != rawType &&
		(t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType)):
		return apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: keep}, true
	}
	return apiextensionsv1.JSONSchemaProps{}, false
}

// conditionShaped reports whether struct type t is a condition by
// Kubernetes' API conventions, as metav1.Condition is: it has the fields
// type, status and lastTransitionTime, a metav1.Time.
func conditionShaped(t reflect.Type) bool {
	if t == conditionType {
		return true
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	fields, _ := jsonFields(t)
	var typ, status, ltt bool
	for _, f := range fields {
		switch {
		case f.name == "type" && f.typ.Kind() == reflect.String:
			typ = true
		case f.name == "status" && f.typ.Kind() == reflect.String:
			status = true
		case f.name == "lastTransitionTime" && f.typ == timeType:
			ltt = true
		}
	}
	return typ && status && ltt
}

// zeroIsNull reports whether t is one of the struct types whose MarshalJSON
// writes null for a zero value: metav1.Time, metav1.MicroTime and
// runtime.RawExtension.
func zeroIsNull(t reflect.Type) bool {
	return t == timeType || t == microTimeType || t == rawType
}

// mayBeNil reports whether encoding/json writes null for a nil or zero
// value of t: a slice or a map that doesn't encode itself, and
// metav1.Time, metav1.MicroTime and runtime.RawExtension, whose MarshalJSON
// writes null for a zero value. A type given its schema with Schema is the
// user's to mark nullable.
func (b *reflector) mayBeNil(t reflect.Type) bool {
	if r := b.rules[t]; r != nil && r.Schema != nil {
		return false
	}
	if zeroIsNull(t) {
		return true
	}
	if t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
		return false
	}
	p := reflect.PointerTo(t)
	return !p.Implements(marshalerType) && !p.Implements(textMarshalerType)
}

// element is the schema of an item of an array or a value of a map: a
// pointer's is its element's, nullable, since a nil pointer encodes as
// null, as a nil slice or map does.
func (b *reflector) element(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	if t.Kind() != reflect.Pointer {
		s := b.schema(t, path)
		if b.mayBeNil(t) && !b.constrained(t) {
			s.Nullable = true
		}
		return s
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := b.schema(t, path)
	s.Nullable = !b.constrained(t)
	return s
}

// enter marks t as being reflected at path, and reports a type that
// contains itself.
func (b *reflector) enter(t reflect.Type, path string) bool {
	if b.visiting[t] {
		b.report("recursive "+t.String(), fmt.Errorf("kube: %s: %s contains itself, which a schema without $ref can't express", path, t))
		return false
	}
	b.visiting[t] = true
	return true
}

func (b *reflector) leave(t reflect.Type) { delete(b.visiting, t) }
