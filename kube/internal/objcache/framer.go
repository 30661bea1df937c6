package objcache

import (
	"bufio"
	"errors"
	"io"
)

// jsonFramer splits a watch's JSON stream into its events, as
// apimachinery's json.Framer does, without its cost: that reader finds
// where each event ends with encoding/json's Decoder, which checks every
// byte against JSON's grammar on the way (3% of the controller's CPU while
// 5,000 objects converge). This one only follows strings and brackets to
// the end of each top-level object or array, since the events are decoded
// next anyway, by the cache's codec (client.go), which refuses what
// isn't JSON.
type jsonFramer struct{}

// NewFrameReader returns the reader of r's frames: each Read returns one
// whole frame if data can hold it, and else as much as it can with
// io.ErrShortBuffer, and the rest on the next Reads, as apimachinery's
// frame readers do (streaming.NewDecoder grows its buffer on it).
func (jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &jsonFrameReader{r: bufio.NewReaderSize(r, 32<<10), c: r}
}

// NewFrameWriter returns w: a JSON stream needs no framing to be written.
func (jsonFramer) NewFrameWriter(w io.Writer) io.Writer { return w }

// jsonFrameReader is jsonFramer's frame reader.
type jsonFrameReader struct {
	r         *bufio.Reader
	c         io.Closer
	frame     []byte // the frame being read out, reused from one to the next
	remaining []byte // what of it the last Read couldn't hold
}

// errNotAFrame is a stream whose next value isn't an object or an array.
var errNotAFrame = errors.New("objcache: a watch's stream holds a value that is no JSON object or array")

func (f *jsonFrameReader) Read(data []byte) (int, error) {
	if len(f.remaining) == 0 {
		frame, err := f.next()
		if err != nil {
			return 0, err
		}
		f.remaining = frame
	}
	n := copy(data, f.remaining)
	f.remaining = f.remaining[n:]
	if len(f.remaining) > 0 {
		return n, io.ErrShortBuffer
	}
	return n, nil
}

func (f *jsonFrameReader) Close() error { return f.c.Close() }

// next reads the next top-level JSON object or array, after any
// whitespace. A stream that ends between frames ends with io.EOF, and in
// one with io.ErrUnexpectedEOF.
func (f *jsonFrameReader) next() ([]byte, error) {
	for {
		b, err := f.r.Peek(1)
		if err != nil {
			return nil, err
		}
		switch b[0] {
		case ' ', '\t', '\n', '\r':
			if _, err := f.r.Discard(1); err != nil {
				return nil, err
			}
			continue
		case '{', '[':
		default:
			return nil, errNotAFrame
		}
		break
	}
	f.frame = f.frame[:0]
	depth, inString, escaped := 0, false, false
	for {
		chunk, err := f.r.Peek(max(f.r.Buffered(), 1))
		if len(chunk) == 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		for i, c := range chunk {
			if inString {
				switch {
				case escaped:
					escaped = false
				case c == '\\':
					escaped = true
				case c == '"':
					inString = false
				}
				continue
			}
			switch c {
			case '"':
				inString = true
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					f.frame = append(f.frame, chunk[:i+1]...)
					_, err := f.r.Discard(i + 1)
					return f.frame, err
				}
			}
		}
		f.frame = append(f.frame, chunk...)
		if _, err := f.r.Discard(len(chunk)); err != nil {
			return nil, err
		}
	}
}
