package objcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// readFrames reads every frame of stream through framer's reader, into a
// buffer of size bytes, growing nothing: a frame larger than the buffer
// comes in pieces, as streaming.NewDecoder takes it.
func readFrames(t *testing.T, framer interface {
	NewFrameReader(io.ReadCloser) io.ReadCloser
}, stream io.Reader, size int) ([]string, error) {
	t.Helper()
	r := framer.NewFrameReader(io.NopCloser(stream))
	defer r.Close()
	var frames []string
	var frame []byte
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		frame = append(frame, buf[:n]...)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			continue
		case err != nil:
			return frames, err
		}
		frames = append(frames, string(frame))
		frame = nil
	}
}

var frameSeeds = []string{
	`{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"s":"}{][\"\\"}}}`,
	`{}`,
	`[{"a":[1,2,{"b":"]"}]}]`,
	`{"a":"\\\\"}`,
	`{"a" : { "b" : [ ] } , "c" : "\u007d" }`,
}

func TestTheFramerSplitsAStreamAsApimachinerysDoes(t *testing.T) {
	stream := strings.Join(frameSeeds, "\n") + "\n  \r\n\t" + frameSeeds[0]
	for _, size := range []int{1, 7, 64, 4096} {
		want, wantErr := readFrames(t, jsonserializer.Framer, strings.NewReader(stream), size)
		got, err := readFrames(t, jsonFramer{}, iotest.OneByteReader(strings.NewReader(stream)), size)
		require.Equal(t, want, got, "buffer of %d bytes", size)
		require.ErrorIs(t, wantErr, io.EOF)
		require.ErrorIs(t, err, io.EOF)
	}
}

func TestAStreamCutInAFrameEndsUnexpectedly(t *testing.T) {
	frames, err := readFrames(t, jsonFramer{}, strings.NewReader(frameSeeds[0]+"\n"+`{"type":"ADD`), 4096)
	require.Equal(t, []string{frameSeeds[0]}, frames)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = readFrames(t, jsonFramer{}, strings.NewReader(`"a string"`), 4096)
	require.ErrorIs(t, err, errNotAFrame)
}

func FuzzJSONFramer(f *testing.F) {
	for _, seed := range frameSeeds {
		f.Add([]byte(seed), []byte(" \n"))
	}
	f.Fuzz(func(t *testing.T, value, space []byte) {
		value = bytes.TrimSpace(value)
		if !json.Valid(value) || len(value) == 0 || (value[0] != '{' && value[0] != '[') || len(bytes.TrimLeft(space, " \t\r\n")) > 0 {
			return
		}
		stream := bytes.Join([][]byte{value, value, value}, space)
		got, err := readFrames(t, jsonFramer{}, iotest.OneByteReader(bytes.NewReader(stream)), 16)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, []string{string(value), string(value), string(value)}, got)
	})
}
