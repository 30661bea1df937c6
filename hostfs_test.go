package humus_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
)

// TestOSHostsFSSaysAFileIsNamedWithNoLeadingSlash: a name with a leading
// slash, as a path from the environment is, fails saying how to name it,
// where os.DirFS("/") said only "invalid argument".
func TestOSHostsFSSaysAFileIsNamedWithNoLeadingSlash(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tls.crt")
	require.NoError(t, os.WriteFile(file, []byte("cert"), 0o600))
	fsys := humus.OSHost().FS

	_, err := fs.ReadFile(fsys, file)
	require.ErrorIs(t, err, fs.ErrInvalid)
	want := `a Host's FS names a file relative to / with no leading slash, as io/fs does: "` + strings.TrimPrefix(file, "/") + `", not "` + file + `"`
	require.ErrorContains(t, err, want)
	_, err = fsys.Open(file)
	require.ErrorContains(t, err, want)
	_, err = fs.Stat(fsys, file)
	require.ErrorContains(t, err, want)
	_, err = fs.ReadDir(fsys, dir)
	require.ErrorContains(t, err, "no leading slash")

	b, err := fs.ReadFile(fsys, strings.TrimPrefix(file, "/"))
	require.NoError(t, err)
	require.Equal(t, "cert", string(b))
	entries, err := fs.ReadDir(fsys, strings.TrimPrefix(dir, "/"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
}
