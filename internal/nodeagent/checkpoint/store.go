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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultBootIDPath is the Linux file holding the current boot's random ID.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// DefaultFileName is the agent's checkpoint file name in its state directory.
const DefaultFileName = "kubedevice_checkpoint"

// Options configure a Store. The zero value is valid.
type Options struct {
	// BootIDPath is the file the node's boot ID is read from.
	// Empty means DefaultBootIDPath.
	BootIDPath string
	// Clock supplies write times and quarantine timestamps.
	// Nil means the real clock.
	Clock clock.PassiveClock
}

// Store reads and writes the agent's checkpoint file. It is safe for
// concurrent use; writes are serialized.
type Store struct {
	path   string
	bootID string
	clock  clock.PassiveClock

	mu sync.Mutex
}

// Checkpoint is a checkpoint as read from disk: its state and where it came from.
type Checkpoint struct {
	// State is the recorded state.
	State State
	// BootID is the boot ID of the node when the file was written.
	BootID string
	// WrittenAt is when the file was written (UTC).
	WrittenAt time.Time
	// Rebooted is true when BootID differs from the node's current boot ID:
	// the node restarted since the write, so no container that held these
	// devices is still running.
	Rebooted bool
	// Format is the format version of the file that was read: Version (the
	// Store's JSON) or JournalVersion.
	Format int
	// TornTail, when set, reports a partial last frame of a journal: a
	// write that never finished, left out of State.
	TornTail *TornTail
}

// New returns a Store for the checkpoint file at path. It reads the node's
// boot ID, creates the file's directory if missing (mode 0750), and removes
// temporary files left by an interrupted write of an earlier process, so
// only one agent process may use path at a time.
func New(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("creating checkpoint store: empty path")
	}
	if opts.BootIDPath == "" {
		opts.BootIDPath = DefaultBootIDPath
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	bootID, err := readBootID(opts.BootIDPath)
	if err != nil {
		return nil, fmt.Errorf("creating checkpoint store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating checkpoint directory for %s: %w", path, err)
	}
	if err := removeStaleTempFiles(path); err != nil {
		return nil, fmt.Errorf("creating checkpoint store: %w", err)
	}
	return &Store{path: path, bootID: bootID, clock: opts.Clock}, nil
}

// readBootID returns the trimmed content of the boot ID file.
func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("reading boot ID: %s is empty", path)
	}
	return id, nil
}

// Path returns the checkpoint file path.
func (s *Store) Path() string { return s.path }

// BootID returns the node's current boot ID, as recorded by Write.
func (s *Store) BootID() string { return s.bootID }

// Write atomically and durably replaces the checkpoint with state, stamped
// with the current boot ID and time. When it returns nil the new state is
// on disk (file and directory fsynced); on error the previous checkpoint is
// left intact. State that no reader would accept (an empty pod UID,
// container or resource name, an empty device ID, a NUMA node below -1) is
// refused without touching the file.
func (s *Store) Write(state State) error {
	if err := state.validate(); err != nil {
		return fmt.Errorf("writing checkpoint %s: %w", s.path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	blob, err := encodeV1(state, s.bootID, s.clock.Now())
	if err != nil {
		return fmt.Errorf("writing checkpoint %s: %w", s.path, err)
	}
	if err := writeFileAtomic(s.path, blob); err != nil {
		return fmt.Errorf("writing checkpoint %s: %w", s.path, err)
	}
	return nil
}

// Read loads the checkpoint.
//
// If there is no file it returns an error matching ErrNotFound. If the file
// exists but cannot be read, decoded or verified, it moves the file aside to
// "<path>.corrupt-<UTC timestamp>" and returns a *CorruptError (matching
// ErrCorrupt) so the caller can report it and rebuild its state; the next
// Write then starts a fresh file. Read never returns empty state in place of
// a file it could not use.
func (s *Store) Read() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp, err := readOrQuarantine(s.path, s.clock.Now, decodeVersion1)
	if err != nil {
		return nil, err
	}
	cp.Rebooted = cp.BootID != s.bootID
	return cp, nil
}
