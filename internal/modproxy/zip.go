package main

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// maxZipSize is the most the go command unpacks from a module zip.
const maxZipSize = 500 << 20

// skippedDir says whether a directory of this name is left out of a module
// wherever it is: version-control data and vendored copies.
func skippedDir(name string) bool {
	switch name {
	case ".git", ".hg", ".svn", ".bzr", "vendor":
		return true
	}
	return false
}

// moduleFiles lists the files of the module at dir, as slash-separated
// paths relative to dir: every regular file but those under a skipped
// directory or in a nested module (a subdirectory with a go.mod), and,
// unless keep is nil, but those keep does not hold (by clean path).
func moduleFiles(dir string, keep map[string]bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == dir {
				return nil
			}
			if skippedDir(d.Name()) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		if !d.Type().IsRegular() || (keep != nil && !keep[filepath.Clean(p)]) {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}

// writeZip writes the zip of module m at version to file: each of the
// module's files named module@version/path, dated at; keep as for
// moduleFiles.
func writeZip(file string, m module, version string, at time.Time, keep map[string]bool) (err error) {
	files, err := moduleFiles(m.dir, keep)
	if err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(f)
	prefix := m.path + "@" + version + "/"
	var size int64
	for _, name := range files {
		n, err := addFile(zw, prefix+name, filepath.Join(m.dir, filepath.FromSlash(name)), at)
		if err != nil {
			return err
		}
		if size += n; size > maxZipSize {
			return fmt.Errorf("module files exceed %d bytes", maxZipSize)
		}
	}
	return zw.Close()
}

// addFile copies the file at src into zw as name, dated at, and returns
// its size.
func addFile(zw *zip.Writer, name, src string, at time.Time) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: at})
	if err != nil {
		return 0, err
	}
	return io.Copy(w, in)
}
