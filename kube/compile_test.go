package kube_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The spec's three mistakes that are compile errors, each in a file of its
// own, as the end user would write them.
var compileErrors = map[string]struct{ code, want string }{
	"misspelled.go": {
		code: `kube.Field(&spec.Size).Minimun(1)`,
		want: "kube.FieldOf[int32] has no field or method Minimun",
	},
	"wrongvalue.go": {
		code: `kube.Field(&spec.Size).Minimum("one")`,
		want: `cannot use "one" (untyped string constant) as int32 value`,
	},
	"wrongdefault.go": {
		code: `kube.Field(&spec.Image).Default(3)`,
		want: "cannot use 3 (untyped int constant) as string value",
	},
}

// TestMistakesInRulesAreCompileErrors builds a package of the three
// mistakes against this module, offline, and expects the compiler's own
// messages, one for each file.
func TestMistakesInRulesAreCompileErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	kubeDir, err := os.Getwd()
	require.NoError(t, err)
	replaces := replacements(t, kubeDir)

	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("go.mod", "module example.com/mistakes\n\ngo 1.26\n\n"+
		"require github.com/z5labs/humus/kube v0.0.0\n\n"+
		"replace github.com/z5labs/humus/kube => "+kubeDir+"\n\n"+replaces)
	sum, err := os.ReadFile(filepath.Join(kubeDir, "go.sum"))
	require.NoError(t, err)
	write("go.sum", string(sum))
	write("types.go", `package mistakes

type MemcachedSpec struct {
	Size  int32  `+"`json:\"size\"`"+`
	Image string `+"`json:\"image\"`"+`
}

var spec MemcachedSpec
`)
	for name, c := range compileErrors {
		write(name, "package mistakes\n\nimport \"github.com/z5labs/humus/kube\"\n\nvar _ = "+c.code+"\n")
	}

	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the mistakes compiled:\n%s", out)

	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		file, msg, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "./"), ":")
		if ok && strings.HasSuffix(file, ".go") {
			got[file] += msg
		}
	}
	require.Len(t, got, len(compileErrors), "an error in each file, and no other file:\n%s", out)
	for name, c := range compileErrors {
		require.Contains(t, got[name], c.want, "%s: %s", name, c.code)
	}
}

// replacements are the replace directives of the kube module's go.mod,
// such as github.com/z5labs/humus => ../, with absolute paths, for a module
// that requires it.
func replacements(t *testing.T, kubeDir string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(kubeDir, "go.mod"))
	require.NoError(t, err)
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 4 && fields[0] == "replace" && fields[2] == "=>" {
			dir := fields[3]
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(kubeDir, dir)
			}
			out.WriteString("replace " + fields[1] + " => " + dir + "\n")
		}
	}
	require.NoError(t, sc.Err())
	require.Contains(t, out.String(), "github.com/z5labs/humus =>", "kube's go.mod replaces the humus module")
	return out.String()
}
