package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// A module is one module of the tree: its path and its directory.
type module struct {
	path string
	dir  string
}

// releaseVersion matches a semantic version a tag can carry: vMAJOR.MINOR.PATCH
// with an optional pre-release; the go command takes no build metadata
// but +incompatible, which a module with a go.mod never has.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// pseudoVersion matches the end of a pseudo-version (a time and a commit
// hash), which names a commit, never a tag.
var pseudoVersion = regexp.MustCompile(`[-.][0-9]{14}-[0-9a-f]{12}$`)

// write serves every module of tree at version from the proxy directory
// out, with at as the versions' time, and returns the modules served, the
// root's first.
func write(tree, out, version string, at time.Time) ([]module, error) {
	if !releaseVersion.MatchString(version) || pseudoVersion.MatchString(version) {
		return nil, fmt.Errorf("version %q is not a release version (vMAJOR.MINOR.PATCH[-pre])", version)
	}
	mods, err := modules(tree)
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 || mods[0].dir != filepath.Clean(tree) {
		return nil, fmt.Errorf("%s has no go.mod", tree)
	}
	for _, m := range mods {
		if err := checkMajor(m.path, version); err != nil {
			return nil, err
		}
	}
	keep, err := gitFiles(tree)
	if err != nil {
		return nil, err
	}
	for _, m := range mods {
		if err := serve(m, out, version, at, keep); err != nil {
			return nil, fmt.Errorf("%s: %w", m.path, err)
		}
	}
	return mods, nil
}

// modules finds the modules of tree: its root's and every nested one's,
// leaving out the directories the go command never takes packages from
// (version control, vendor, testdata, names starting with . or _).
func modules(tree string) ([]module, error) {
	tree = filepath.Clean(tree)
	var mods []module
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != tree && (skippedDir(d.Name()) || d.Name() == "testdata" ||
			strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		data, err := os.ReadFile(filepath.Join(p, "go.mod"))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		mp, err := modulePath(data)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(p, "go.mod"), err)
		}
		mods = append(mods, module{path: mp, dir: p})
		return nil
	})
	return mods, err
}

// modulePath reads the module directive of a go.mod file.
func modulePath(gomod []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || !unicode.IsSpace(rune(rest[0])) {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, `"`) || strings.HasPrefix(rest, "`") {
			unquoted, err := strconv.Unquote(rest)
			if err != nil {
				return "", fmt.Errorf("module directive %s: %w", rest, err)
			}
			rest = unquoted
		}
		if rest == "" {
			break
		}
		return rest, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no module directive")
}

// checkMajor refuses a version whose major version the module path does
// not carry: from v2 on, the path ends in /vN.
func checkMajor(modPath, version string) error {
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if major == "0" || major == "1" {
		return nil
	}
	if path.Base(modPath) != "v"+major {
		return fmt.Errorf("%s cannot have version %s: its path does not end in /v%s", modPath, version, major)
	}
	return nil
}

// serve writes one module's list, .info, .mod and .zip files; keep as for
// moduleFiles.
func serve(m module, out, version string, at time.Time, keep map[string]bool) error {
	vdir := filepath.Join(out, filepath.FromSlash(escape(m.path)), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, at})
	if err != nil {
		return err
	}
	file := filepath.Join(vdir, escape(version))
	if err := writeZip(file+".zip", m, version, at, keep); err != nil {
		return err
	}
	if err := os.WriteFile(file+".mod", gomod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(file+".info", info, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vdir, "list"), []byte(version+"\n"), 0o644)
}

// escape writes a module path or version as a proxy names it: each
// upper-case letter as ! and the letter in lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
