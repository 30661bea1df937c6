package humus

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// rootFS is OSHost's FS: os.DirFS("/"), whose names are io/fs's, relative
// to / with no leading slash, and whose error for a name that isn't one,
// such as /tmp/certs/tls.crt, says so and names the name it takes, where
// os.DirFS's says only "invalid argument".
type rootFS struct{ dir fs.FS }

var (
	_ fs.ReadFileFS = rootFS{}
	_ fs.StatFS     = rootFS{}
	_ fs.ReadDirFS  = rootFS{}
)

func newRootFS() rootFS { return rootFS{dir: os.DirFS("/")} }

// check returns a *fs.PathError for which errors.Is(err, fs.ErrInvalid)
// reports true, saying how to name the file, unless name is valid.
func (rootFS) check(op, name string) error {
	if fs.ValidPath(name) {
		return nil
	}
	err := fmt.Errorf("%w: a Host's FS names a file relative to / with no leading slash, as io/fs does", fs.ErrInvalid)
	if fixed := strings.TrimPrefix(path.Clean(name), "/"); fixed != "" && fs.ValidPath(fixed) {
		err = fmt.Errorf("%w: a Host's FS names a file relative to / with no leading slash, as io/fs does: %q, not %q", fs.ErrInvalid, fixed, name)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func (r rootFS) Open(name string) (fs.File, error) {
	if err := r.check("open", name); err != nil {
		return nil, err
	}
	return r.dir.Open(name)
}

func (r rootFS) ReadFile(name string) ([]byte, error) {
	if err := r.check("readfile", name); err != nil {
		return nil, err
	}
	return fs.ReadFile(r.dir, name)
}

func (r rootFS) Stat(name string) (fs.FileInfo, error) {
	if err := r.check("stat", name); err != nil {
		return nil, err
	}
	return fs.Stat(r.dir, name)
}

func (r rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := r.check("readdir", name); err != nil {
		return nil, err
	}
	return fs.ReadDir(r.dir, name)
}
