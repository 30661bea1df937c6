package objcache

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"

	gojson "github.com/goccy/go-json"
	"google.golang.org/protobuf/encoding/protowire"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The media types of a write's answer that CreatedMetadata reads:
// client-go's typed clients ask for protobuf
// (rest.CodecFactoryForGeneratedClient), its dynamic client and a custom
// resource's answers are JSON.
const (
	mediaTypeJSON     = "application/json"
	mediaTypeProtobuf = "application/vnd.kubernetes.protobuf"
)

// protobufPrefix begins every protobuf answer of the API server's, before
// its runtime.Unknown envelope (apimachinery's
// pkg/runtime/serializer/protobuf).
var protobufPrefix = []byte("k8s\x00")

// CreatedMetadata reads the metadata of the object a write's answer
// holds, when the write created it: its name, namespace, uid,
// resourceVersion, labels and owner references, nothing else. It gives
// resp a body that reads as the answer did: its bytes, and then any error
// reading them ended in. It returns nil for a failed request, an answer
// other than 201 Created, one that is neither JSON nor protobuf, or one
// that doesn't decode.
func CreatedMetadata(resp *http.Response, err error) *metav1.ObjectMeta {
	if err != nil || resp == nil || resp.Body == nil || resp.StatusCode != http.StatusCreated {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	isJSON, isProtobuf := strings.HasPrefix(ct, mediaTypeJSON), strings.HasPrefix(ct, mediaTypeProtobuf)
	if !isJSON && !isProtobuf {
		return nil
	}
	b, readErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var body io.Reader = bytes.NewReader(b)
	if readErr != nil {
		body = io.MultiReader(body, errReader{readErr})
	}
	resp.Body = io.NopCloser(body)
	if readErr != nil {
		return nil
	}
	if isJSON {
		return metadataFromJSON(b)
	}
	if !bytes.HasPrefix(b, protobufPrefix) {
		return nil
	}
	m, err := metadataFromProtobuf(b[len(protobufPrefix):])
	if err != nil {
		return nil
	}
	return &m
}

// metadataFromJSON reads what CreatedMetadata reads of the object whose
// JSON is b, or nil if it doesn't decode. Only the fields read are
// decoded: the managed fields are often the larger part of the metadata.
func metadataFromJSON(b []byte) *metav1.ObjectMeta {
	var j struct {
		Metadata struct {
			Name            string                  `json:"name"`
			Namespace       string                  `json:"namespace"`
			UID             types.UID               `json:"uid"`
			ResourceVersion string                  `json:"resourceVersion"`
			Labels          map[string]string       `json:"labels"`
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if gojson.Unmarshal(b, &j) != nil {
		return nil
	}
	return &metav1.ObjectMeta{Name: j.Metadata.Name, Namespace: j.Metadata.Namespace, UID: j.Metadata.UID,
		ResourceVersion: j.Metadata.ResourceVersion, Labels: j.Metadata.Labels, OwnerReferences: j.Metadata.OwnerReferences}
}

// metadataFromProtobuf reads the name, namespace, uid, resourceVersion,
// labels and owner references of the object in a runtime.Unknown
// envelope, the API server's protobuf encoding less its prefix: the
// envelope's field 2 is the object, an object's field 1 its ObjectMeta (as
// PartialObjectMetadata's is), whose fields 1, 3, 5, 6, 11 and 13 are
// those (apimachinery's generated.proto), the labels a map, whose entries
// are messages of a key (1) and a value (2). The managed fields, often the
// larger part of the metadata, are skipped undecoded.
func metadataFromProtobuf(b []byte) (metav1.ObjectMeta, error) {
	var m metav1.ObjectMeta
	raw, err := protoBytesField(b, 2)
	if err != nil {
		return m, err
	}
	meta, err := protoBytesField(raw, 1)
	if err != nil {
		return m, err
	}
	err = protoFields(meta, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 11:
			var key, value string
			if err := protoFields(v, func(num protowire.Number, e []byte) error {
				switch num {
				case 1:
					key = string(e)
				case 2:
					value = string(e)
				}
				return nil
			}); err != nil {
				return err
			}
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[key] = value
		case 13:
			var ref metav1.OwnerReference
			if err := ref.Unmarshal(v); err != nil {
				return err
			}
			m.OwnerReferences = append(m.OwnerReferences, ref)
		}
		return nil
	})
	return m, err
}

// errProtobuf is the error of a message that doesn't parse.
var errProtobuf = errors.New("objcache: a protobuf message that doesn't parse")

// protoFields calls f with the number and bytes of each length-delimited
// field of the protobuf message b, and skips the others.
func protoFields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errProtobuf
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errProtobuf
			}
			if err := f(num, v); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return errProtobuf
		}
		b = b[n:]
	}
	return nil
}

// protoBytesField is the last length-delimited field numbered num of the
// protobuf message b, as a message's last value of a field wins.
func protoBytesField(b []byte, num protowire.Number) ([]byte, error) {
	var found []byte
	err := protoFields(b, func(n protowire.Number, v []byte) error {
		if n == num {
			found = v
		}
		return nil
	})
	return found, err
}

// errReader returns err from every Read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
