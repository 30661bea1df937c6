package objcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The resource's list and watch are read straight into cachedObjects, from
// the API server's JSON, with no unstructured object between: client-go's
// dynamic client decoded each event's JSON three times (its envelope, its
// kind, its object into maps), and NewObject encoded the maps back
// to JSON, 21% of the controller's CPU while 5,000 objects converge.
//
// cachedFromJSON scans an object's JSON once, without decoding it: it
// finds the metadata, cuts its managed fields out, and reads the few
// fields the controller reads as substrings of what is left. The JSON is
// the API server's, which encodes a custom resource's maps with sorted keys
// and no spaces, so one object's fields are the same bytes whenever their
// values are (ChangedOnly relies on it). Anything the scan doesn't
// expect, such as an object without metadata, is an error, and the caller
// then decodes the object as client-go would (ObjectFromJSON).

// errNotScanned is the error of JSON the scan doesn't read.
var errNotScanned = errors.New("objcache: JSON the cache's scan doesn't read")

// scanSpace skips JSON whitespace in b from i.
func scanSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the end, past its closing quote, of the JSON string
// that begins at b[i].
func scanString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errNotScanned
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errNotScanned
}

// scanValue returns the end of the JSON value that begins at b[i].
func scanValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errNotScanned
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{':
		return scanFields(b, i, nil)
	case c == '[':
		return scanElements(b, i, nil)
	case c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9'):
		j := i
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] >= 'a' && b[j] <= 'z' || b[j] == '.' || b[j] == '-' || b[j] == '+' || b[j] == 'E') {
			j++
		}
		return j, nil
	default:
		return 0, errNotScanned
	}
}

// field is one field of a JSON object, as scanFields finds it: its key as
// written, escapes and all, without quotes, and the spans of b (the
// object's JSON) that are the whole field, from its key's opening quote
// (start), and its value (valueStart to end).
type field struct {
	key                    []byte
	start, valueStart, end int

	escaped bool // key holds an escape
}

// is reports whether f's key is key once unescaped, as encoding/json reads
// it: "na\u006de" is "name". The key is only decoded when it holds an
// escape, which the API server never writes.
func (f field) is(key string) bool {
	if !f.escaped {
		return string(f.key) == key
	}
	var k string
	err := json.Unmarshal(append(append([]byte{'"'}, f.key...), '"'), &k)
	return err == nil && k == key
}

// text is f's value if it is a JSON string, as jsonText reads it, and
// false if it is not.
func (f field) text(b []byte) (string, bool) {
	t, err := jsonText(string(b[f.valueStart:f.end]), 0, f.end-f.valueStart)
	return t, err == nil
}

// scanFields calls f, unless it is nil, with each field of the JSON object
// that begins at b[i], in order, repeated keys and all (encoding/json
// keeps a repeated key's last value), and returns the object's end, past
// its closing brace.
func scanFields(b []byte, i int, f func(field) error) (int, error) {
	return scanMembers(b, i, '{', '}', func(start int) (int, error) {
		keyEnd, err := scanString(b, start)
		if err != nil {
			return 0, err
		}
		i := scanSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, errNotScanned
		}
		valueStart := scanSpace(b, i+1)
		end, err := scanValue(b, valueStart)
		if err != nil || f == nil {
			return end, err
		}
		key := b[start+1 : keyEnd-1]
		return end, f(field{key: key, escaped: bytes.IndexByte(key, '\\') >= 0, start: start, valueStart: valueStart, end: end})
	})
}

// scanElements calls f, unless it is nil, with the span of each element
// of the JSON array that begins at b[i], and returns the array's end.
func scanElements(b []byte, i int, f func(start, end int) error) (int, error) {
	return scanMembers(b, i, '[', ']', func(start int) (int, error) {
		end, err := scanValue(b, start)
		if err != nil || f == nil {
			return end, err
		}
		return end, f(start, end)
	})
}

// scanMembers scans the JSON object or array that begins at b[i] with
// open and ends with closing: member scans each of its members, from
// where it begins to where it ends, and the commas between are checked
// here. It returns the end, past closing.
func scanMembers(b []byte, i int, open, closing byte, member func(start int) (end int, err error)) (int, error) {
	if i >= len(b) || b[i] != open {
		return 0, errNotScanned
	}
	i = scanSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, nil
	}
	for {
		end, err := member(i)
		if err != nil {
			return 0, err
		}
		i = scanSpace(b, end)
		switch {
		case i >= len(b):
			return 0, errNotScanned
		case b[i] == ',':
			i = scanSpace(b, i+1)
		case b[i] == closing:
			return i + 1, nil
		default:
			return 0, errNotScanned
		}
	}
}

// jsonText is the string the JSON string raw[start:end] holds: a substring
// of raw when it holds no escape and is UTF-8, as the API server's names,
// uids and resourceVersions always are, and else decoded as encoding/json
// decodes it.
func jsonText(raw string, start, end int) (string, error) {
	s := raw[start:end]
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", errNotScanned
	}
	if !strings.ContainsRune(s, '\\') && utf8.ValidString(s) {
		return s[1 : len(s)-1], nil
	}
	var t string
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return "", errNotScanned
	}
	return t, nil
}

// initialEventsEnd is the annotation of the bookmark that ends a watch's
// initial events (metav1.InitialEventsAnnotationKey), which the reflector
// reads.
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// scanMetadata calls f with each field of the metadata of the object whose
// JSON is b, and reports whether the object is a Status, whose metadata it
// doesn't scan. An object without metadata is an error. Of a repeated
// key, the last is read, as encoding/json reads it.
func scanMetadata(b []byte, f func(field) error) (status bool, err error) {
	var md *field
	var kind, apiVersion string
	if _, err := scanFields(b, scanSpace(b, 0), func(f field) error {
		switch {
		case f.is("metadata"):
			md = &f
		case f.is("kind"):
			kind, _ = f.text(b)
		case f.is("apiVersion"):
			apiVersion, _ = f.text(b)
		}
		return nil
	}); err != nil {
		return false, err
	}
	if kind == "Status" && apiVersion == "v1" {
		return true, nil
	}
	if md == nil || b[md.valueStart] != '{' {
		return false, errNotScanned
	}
	_, err = scanFields(b, md.valueStart, f)
	return false, err
}

// versionFromJSON reads the namespace, name, uid and resourceVersion of
// the object whose JSON is b, such as an apply's answer, copying them.
func versionFromJSON(b []byte) (namespace, name string, v Version, err error) {
	status, err := scanMetadata(b, func(f field) error {
		var err error
		text := func() string {
			t, ok := f.text(b)
			if !ok {
				err = errNotScanned
			}
			return t
		}
		switch {
		case f.is("namespace"):
			namespace = text()
		case f.is("name"):
			name = text()
		case f.is("uid"):
			v.UID = types.UID(text())
		case f.is("resourceVersion"):
			v.ResourceVersion = text()
		}
		return err
	})
	if err == nil && status {
		err = errNotScanned
	}
	return namespace, name, v, err
}

// scannedObject is an object's JSON, scanned: the Object, or
// whether it is a Status, as a watch's error event holds, which has no
// Object.
type scannedObject struct {
	obj    *Object
	status bool
}

// cachedFromJSON is the object whose JSON is b as the resource's cache
// holds it: b without its metadata's managedFields, with its name,
// namespace, uid, resourceVersion, generation, deletionTimestamp and
// finalizers read from it, and the initial-events-end annotation of a
// watch's bookmark. It copies what it keeps of b. It returns errNotScanned
// for JSON it doesn't read.
func cachedFromJSON(b []byte) (scannedObject, error) {
	var fields []field
	status, err := scanMetadata(b, func(f field) error {
		fields = append(fields, f)
		return nil
	})
	if err != nil || status {
		return scannedObject{status: status}, err
	}
	raw, at := cutManagedFields(b, fields)
	s := scannedObject{obj: &Object{raw: raw}}
	c := s.obj
	for _, f := range fields {
		// A repeated key's last value is the one read, null included.
		null := string(b[f.valueStart:f.end]) == "null"
		start, end := at(f.valueStart), at(f.end)
		var err error
		switch {
		case f.is("managedFields"):
		case f.is("name"):
			var name string
			name, err = metadataText(raw, start, end, null)
			c.SetName(name)
		case f.is("namespace"):
			var ns string
			ns, err = metadataText(raw, start, end, null)
			c.SetNamespace(ns)
		case f.is("uid"):
			var uid string
			uid, err = metadataText(raw, start, end, null)
			c.SetUID(types.UID(uid))
		case f.is("resourceVersion"):
			var rv string
			rv, err = metadataText(raw, start, end, null)
			c.SetResourceVersion(rv)
		case f.is("generation"):
			c.generation = 0
			if !null {
				c.generation, err = strconv.ParseInt(raw[start:end], 10, 64)
			}
		case f.is("deletionTimestamp"):
			c.SetDeletionTimestamp(nil)
			if !null {
				t := new(metav1.Time)
				if err = t.UnmarshalJSON(b[f.valueStart:f.end]); err == nil {
					c.SetDeletionTimestamp(t)
				}
			}
		case f.is("finalizers"):
			var fs []string
			if !null {
				_, err = scanElements(b, f.valueStart, func(s, e int) error {
					f, err := jsonText(raw, at(s), at(e))
					fs = append(fs, f)
					return err
				})
			}
			c.SetFinalizers(fs)
		case f.is("annotations"):
			eventsEnd := false
			if !null {
				_, err = scanFields(b, f.valueStart, func(a field) error {
					if a.is(initialEventsEnd) {
						t, _ := a.text(b)
						eventsEnd = t == "true"
					}
					return nil
				})
			}
			if eventsEnd || c.rare != nil {
				c.setRare(func(r *cachedRare) { r.initialEventsEnd = eventsEnd })
			}
		}
		if err != nil {
			return scannedObject{}, fmt.Errorf("%w: metadata.%s: %w", errNotScanned, f.key, err)
		}
	}
	return s, nil
}

// metadataText is the JSON string raw[start:end] as jsonText reads it, or
// "" if it is null.
func metadataText(raw string, start, end int, null bool) (string, error) {
	if null {
		return "", nil
	}
	return jsonText(raw, start, end)
}

// cutManagedFields returns b without the metadata fields, of fields, that
// are managedFields, however often and however escaped, each cut with the
// comma before it, or after it when no field before it is kept; and at,
// which maps an offset of b outside the cuts to its offset in raw.
func cutManagedFields(b []byte, fields []field) (raw string, at func(int) int) {
	type span struct{ start, end int }
	var cuts []span
	kept := -1 // the end of the last field kept
	for i, f := range fields {
		if !f.is("managedFields") {
			kept = f.end
			continue
		}
		cut := span{f.start, f.end}
		switch {
		case kept >= 0:
			cut.start = kept
		case i+1 < len(fields):
			cut.end = fields[i+1].start
		}
		if n := len(cuts); n > 0 && cut.start <= cuts[n-1].end {
			cuts[n-1].end = max(cuts[n-1].end, cut.end)
			continue
		}
		cuts = append(cuts, cut)
	}
	cutBytes := 0
	for _, c := range cuts {
		cutBytes += c.end - c.start
	}
	var sb strings.Builder
	sb.Grow(len(b) - cutBytes)
	from := 0
	for _, c := range cuts {
		sb.Write(b[from:c.start])
		from = c.end
	}
	sb.Write(b[from:])
	return sb.String(), func(i int) int {
		at := i
		for _, c := range cuts {
			if i < c.end {
				break
			}
			at -= c.end - c.start
		}
		return at
	}
}
