package main

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// tree writes files (slash-separated name: content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// sampleTree is a module with a nested module, and the directories and
// files a module zip leaves out.
func sampleTree(t *testing.T) string {
	t.Helper()
	dir := tree(t, map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.22\n",
		"m.go":               "package m\n",
		"sub/sub.go":         "package sub\n",
		".ci/run":            "true\n",
		"nested/go.mod":      "module example.com/m/nested // the nested one\n\ngo 1.22\n",
		"nested/nested.go":   "package nested\n",
		"nested/deep/d.go":   "package deep\n",
		"testdata/go.mod":    "module example.com/fixture\n",
		"testdata/f.go":      "package f\n",
		".git/config":        "[core]\n",
		"vendor/v/v.go":      "package v\n",
		"nested/.hg/hgrc":    "[ui]\n",
		"nested/vendor/x.go": "package x\n",
	})
	require.NoError(t, os.Symlink("m.go", filepath.Join(dir, "link.go")))
	return dir
}

// zipNames lists the names in a zip file, sorted.
func zipNames(t *testing.T, file string) []string {
	t.Helper()
	zr, err := zip.OpenReader(file)
	require.NoError(t, err)
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}

func TestEveryModuleOfTheTreeIsServedAtTheVersion(t *testing.T) {
	dir, out := sampleTree(t), t.TempDir()
	mods, err := write(dir, out, "v1.2.3", at)
	require.NoError(t, err)
	require.Equal(t, []module{
		{path: "example.com/m", dir: dir},
		{path: "example.com/m/nested", dir: filepath.Join(dir, "nested")},
	}, mods)

	assert.Equal(t, []string{
		"example.com/m@v1.2.3/.ci/run",
		"example.com/m@v1.2.3/go.mod",
		"example.com/m@v1.2.3/m.go",
		"example.com/m@v1.2.3/sub/sub.go",
	}, zipNames(t, filepath.Join(out, "example.com/m/@v/v1.2.3.zip")))
	assert.Equal(t, []string{
		"example.com/m/nested@v1.2.3/deep/d.go",
		"example.com/m/nested@v1.2.3/go.mod",
		"example.com/m/nested@v1.2.3/nested.go",
	}, zipNames(t, filepath.Join(out, "example.com/m/nested/@v/v1.2.3.zip")))

	for _, m := range mods {
		vdir := filepath.Join(out, filepath.FromSlash(m.path), "@v")
		list, err := os.ReadFile(filepath.Join(vdir, "list"))
		require.NoError(t, err)
		assert.Equal(t, "v1.2.3\n", string(list))
		gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
		require.NoError(t, err)
		served, err := os.ReadFile(filepath.Join(vdir, "v1.2.3.mod"))
		require.NoError(t, err)
		assert.Equal(t, string(gomod), string(served))
		data, err := os.ReadFile(filepath.Join(vdir, "v1.2.3.info"))
		require.NoError(t, err)
		var info struct {
			Version string
			Time    time.Time
		}
		require.NoError(t, json.Unmarshal(data, &info))
		assert.Equal(t, "v1.2.3", info.Version)
		assert.True(t, at.Equal(info.Time), "info time %v", info.Time)
	}
}

// TestTheGoCommandDownloadsWhatItServes has the go command itself fetch
// both modules from the proxy, which checks the zips' layout as it
// unpacks them.
func TestTheGoCommandDownloadsWhatItServes(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to read the proxy")
	dir, out := sampleTree(t), t.TempDir()
	_, err = write(dir, out, "v1.2.3", at)
	require.NoError(t, err)

	cmd := exec.Command(gocmd, "mod", "download", "-json", "example.com/m@v1.2.3", "example.com/m/nested@v1.2.3")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(out), "GOMODCACHE="+t.TempDir(), "GOFLAGS=-modcacherw",
		"GONOSUMDB=example.com", "GOPRIVATE=", "GONOPROXY=", "GOWORK=off")
	stdout, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s%s", stdout, stderr)

	dec := json.NewDecoder(strings.NewReader(string(stdout)))
	got := map[string][]string{}
	for dec.More() {
		var m struct{ Path, Version, Dir, Error string }
		require.NoError(t, dec.Decode(&m))
		require.Empty(t, m.Error)
		assert.Equal(t, "v1.2.3", m.Version)
		files, err := moduleFiles(m.Dir, nil)
		require.NoError(t, err)
		got[m.Path] = files
	}
	assert.Equal(t, map[string][]string{
		"example.com/m":        {".ci/run", "go.mod", "m.go", "sub/sub.go"},
		"example.com/m/nested": {"deep/d.go", "go.mod", "nested.go"},
	}, got)
}

func TestOnlyAReleaseVersionIsServed(t *testing.T) {
	for _, version := range []string{
		"", "1.2.3", "v1.2", "v01.2.3", "v1.2.3+meta", "v1.2.3-",
		"v0.0.0-00010101000000-000000000000",
		"v0.1.1-0.20260102030405-0123456789ab",
		"v0.1.0-rc.1.0.20260102030405-0123456789ab",
		"v2.0.0", // example.com/m has no /v2
	} {
		t.Run(version, func(t *testing.T) {
			out := t.TempDir()
			_, err := write(sampleTree(t), out, version, at)
			require.Error(t, err)
			entries, err := os.ReadDir(out)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written")
		})
	}
	for _, version := range []string{"v0.1.0", "v1.0.0-rc.1", "v10.20.30-beta.2"} {
		_, err := write(sampleTree(t), t.TempDir(), version, at)
		if version == "v10.20.30-beta.2" {
			require.Error(t, err, "example.com/m cannot be v10")
			continue
		}
		require.NoError(t, err, version)
	}
}

func TestAMajorVersionNeedsItsPathSuffix(t *testing.T) {
	dir := tree(t, map[string]string{"go.mod": "module example.com/m/v2\n"})
	_, err := write(dir, t.TempDir(), "v2.0.1", at)
	require.NoError(t, err)
	_, err = write(dir, t.TempDir(), "v3.0.0", at)
	require.ErrorContains(t, err, "does not end in /v3")
}

func TestATreeWithoutARootModuleIsRefused(t *testing.T) {
	dir := tree(t, map[string]string{"inner/go.mod": "module example.com/inner\n"})
	_, err := write(dir, t.TempDir(), "v0.1.0", at)
	require.ErrorContains(t, err, "has no go.mod")
}

func TestUpperCaseIsEscapedInTheProxy(t *testing.T) {
	dir, out := tree(t, map[string]string{"go.mod": "module example.com/Big/m\n"}), t.TempDir()
	_, err := write(dir, out, "v1.0.0-RC", at)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(out, "example.com/!big/m/@v/v1.0.0-!r!c.zip"))
	assert.Equal(t, []string{"example.com/Big/m@v1.0.0-RC/go.mod"},
		zipNames(t, filepath.Join(out, "example.com/!big/m/@v/v1.0.0-!r!c.zip")))
}

func TestModulePathIsReadFromTheModuleDirective(t *testing.T) {
	for _, tc := range []struct{ gomod, want string }{
		{"module example.com/m\n", "example.com/m"},
		{"// module example.com/not\nmodule example.com/m // comment\n", "example.com/m"},
		{"module \"example.com/m\"\n", "example.com/m"},
		{"module\texample.com/m\ngo 1.22\n", "example.com/m"},
		{"modules example.com/m\n", ""},
		{"go 1.22\n", ""},
		{"module\n", ""},
		{"module \"example.com/m\n", ""},
	} {
		got, err := modulePath([]byte(tc.gomod))
		if tc.want == "" {
			assert.Error(t, err, "%q", tc.gomod)
			continue
		}
		if assert.NoError(t, err, "%q", tc.gomod) {
			assert.Equal(t, tc.want, got, "%q", tc.gomod)
		}
	}
}

// TestInAGitWorkTreeOnlyWhatACommitWouldHoldIsServed: files git ignores
// (a built binary, say) stay out, new files not ignored go in, and a
// tracked file deleted from the work tree is not served.
func TestInAGitWorkTreeOnlyWhatACommitWouldHoldIsServed(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	dir := tree(t, map[string]string{
		".gitignore":       "*.bin\nnested/built\n",
		"go.mod":           "module example.com/m\n",
		"tracked.go":       "package m\n",
		"gone.go":          "package m\n",
		"new.go":           "package m\n",
		"out.bin":          "binary\n",
		"sub/sub.go":       "package sub\n",
		"nested/go.mod":    "module example.com/m/nested\n",
		"nested/nested.go": "package nested\n",
		"nested/built":     "binary\n",
	})
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", ".gitignore", "go.mod", "tracked.go", "gone.go", "sub/sub.go", "nested/go.mod"},
	} {
		cmd := exec.Command(git, append([]string{"-C", dir}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "gone.go")))

	out := t.TempDir()
	_, err = write(dir, out, "v1.0.0", at)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"example.com/m@v1.0.0/.gitignore",
		"example.com/m@v1.0.0/go.mod",
		"example.com/m@v1.0.0/new.go",
		"example.com/m@v1.0.0/sub/sub.go",
		"example.com/m@v1.0.0/tracked.go",
	}, zipNames(t, filepath.Join(out, "example.com/m/@v/v1.0.0.zip")))
	assert.Equal(t, []string{
		"example.com/m/nested@v1.0.0/go.mod",
		"example.com/m/nested@v1.0.0/nested.go",
	}, zipNames(t, filepath.Join(out, "example.com/m/nested/@v/v1.0.0.zip")))
}
