/*
Copyright 2026 The kubedevice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package checkpoint

import (
	"github.com/kubedevice/kubedevice/internal/crashpoint"

	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fileMode is the mode of checkpoint files: they may hold container
// environment values returned by device plugins.
const fileMode os.FileMode = 0o600

// tempPrefix returns the name prefix of the temporary files used to write
// the file named base. The leading dot hides them from globbing tools and
// from kubelet-style directory scans.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// writeFileAtomic replaces path with data so that, after a crash at any
// point, path holds either its old content or the new content in full:
// write a temporary file in the same directory, fsync it, close it, rename
// it over path, then fsync the directory so the rename itself is durable.
func writeFileAtomic(path string, data []byte) (retErr error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, tempPrefix(base))
	if err != nil {
		return fmt.Errorf("creating temporary file for %s: %w", path, err)
	}
	tmpPath := tmp.Name()
	defer func() {
		if retErr != nil {
			_ = tmp.Close()
			_ = os.Remove(tmpPath)
		}
	}()
	if err := tmp.Chmod(fileMode); err != nil {
		return fmt.Errorf("setting mode of %s: %w", tmpPath, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmpPath, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmpPath, err)
	}
	crashpoint.Hit(crashpoint.SnapshotBeforeRename)
	if err := os.Rename(tmpPath, path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmpPath, path, err)
	}
	if err := syncDir(dir); err != nil {
		// The new content is in place; only its durability across a power
		// loss is in doubt. Report it, but there is nothing to undo.
		return err
	}
	return nil
}

// syncDir fsyncs a directory so that renames in it survive a power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s: %w", dir, err)
	}
	syncErr := d.Sync()
	closeErr := d.Close()
	if syncErr != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, syncErr)
	}
	if closeErr != nil {
		return fmt.Errorf("closing directory %s: %w", dir, closeErr)
	}
	return nil
}

// quarantineTimeFormat is the UTC timestamp in quarantined file names; it
// sorts lexically in time order.
const quarantineTimeFormat = "20060102T150405.000000000Z"

// readOrQuarantine reads the checkpoint file at path and decodes it with
// decode, the shape Journal.Read and Store.Read share. No file is an error
// matching ErrNotFound. A file that cannot be read, or that decode refuses,
// is moved aside to "<path>.corrupt-<UTC timestamp of now>" and reported as
// a *CorruptError (its reason from decode's *decodeError, else
// ReasonUnknownFormat) naming where it went: never empty state in place of a
// file that could not be used.
func readOrQuarantine(path string, now func() time.Time, decode func(blob []byte) (*Checkpoint, error)) (*Checkpoint, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading checkpoint %s: %w", path, ErrNotFound)
	}
	var cerr *CorruptError
	var cp *Checkpoint
	if err != nil {
		cerr = &CorruptError{Path: path, Reason: ReasonUnreadable, Err: err}
	} else if cp, err = decode(blob); err != nil {
		cerr = asCorrupt(path, err)
	}
	if cerr == nil {
		return cp, nil
	}
	moved, qerr := quarantine(path, now())
	cerr.QuarantinedPath = moved
	if qerr != nil {
		cerr.Err = errors.Join(cerr.Err, qerr)
	}
	return nil, cerr
}

// freeName returns base, or base with the first numeric suffix ("-2",
// "-3", ...) no file has, for a file set aside.
func freeName(base string) (string, error) {
	target := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
			return target, nil
		} else if err != nil {
			return "", fmt.Errorf("checking %s: %w", target, err)
		}
		target = base + "-" + strconv.Itoa(i)
	}
}

// quarantine moves path aside to "<path>.corrupt-<UTC timestamp>" (with a
// numeric suffix if that name is taken) and returns the new path.
func quarantine(path string, now time.Time) (string, error) {
	target, err := freeName(path + ".corrupt-" + now.UTC().Format(quarantineTimeFormat))
	if err != nil {
		return "", err
	}
	if err := os.Rename(path, target); err != nil {
		return "", fmt.Errorf("moving %s aside: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return target, err
	}
	return target, nil
}

// removeStaleTempFiles deletes the temporary files that an interrupted
// writeFileAtomic of path left behind. It must run before this process
// starts writing path.
func removeStaleTempFiles(path string) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	prefix := tempPrefix(base)
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), prefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing stale temporary files of %s: %w", path, err)
	}
	return nil
}
