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

	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// JournalVersion is the on-disk format version the Journal writes.
const JournalVersion = 2

// Journal is the agent's checkpoint file in format version 2: a snapshot of
// the whole state followed by appended batches, each batch the new state of
// the pods and resources it names. An allocation or a free appends one small
// frame and fdatasyncs it, so its cost does not depend on how many devices
// are registered or how many pods hold devices; Compact rewrites the file as
// one snapshot (temporary file, fsync, rename, fsync of the directory) when
// the appended frames outgrow it.
//
// The Journal reads files of format version 1 (the Store's JSON) as well, so
// an agent upgraded over one converts it on its first write, which is always
// a snapshot.
//
// It is safe for concurrent use; writes are serialized. Only one process may
// use a path at a time.
type Journal struct {
	path   string
	bootID string
	clock  clock.PassiveClock

	mu sync.Mutex
	// f is the file opened for appending by the last snapshot this Journal
	// wrote; nil before, or after a failed append left its tail in doubt.
	f *os.File
	// size is the length of the file as written; snapshotSize that of its
	// snapshot frame.
	size, snapshotSize int64
}

// OpenJournal returns a Journal for the checkpoint file at path. As New, it
// reads the node's boot ID, creates the file's directory if missing (mode
// 0750) and removes temporary files an interrupted snapshot left.
func OpenJournal(path string, opts Options) (*Journal, error) {
	if path == "" {
		return nil, errors.New("creating checkpoint journal: empty path")
	}
	if opts.BootIDPath == "" {
		opts.BootIDPath = DefaultBootIDPath
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	bootID, err := readBootID(opts.BootIDPath)
	if err != nil {
		return nil, fmt.Errorf("creating checkpoint journal %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating checkpoint directory for %s: %w", path, err)
	}
	if err := removeStaleTempFiles(path); err != nil {
		return nil, fmt.Errorf("creating checkpoint journal: %w", err)
	}
	return &Journal{path: path, bootID: bootID, clock: opts.Clock}, nil
}

// Path returns the checkpoint file path.
func (j *Journal) Path() string { return j.path }

// BootID returns the node's current boot ID, as recorded by Compact.
func (j *Journal) BootID() string { return j.bootID }

// Batch is one appended change: the complete new state of some pods and
// some resources. Applying it replaces what the checkpoint held for each of
// them.
type Batch struct {
	// Pods maps a pod UID to all of its committed entries; none means the
	// pod holds no device any more.
	Pods map[string][]Entry
	// Registered maps a resource to the IDs of its registered devices.
	Registered map[string][]string
	// Unregistered are resources no longer recorded.
	Unregistered []string
}

// Empty reports whether the batch changes nothing.
func (b Batch) Empty() bool {
	return len(b.Pods) == 0 && len(b.Registered) == 0 && len(b.Unregistered) == 0
}

func (b Batch) validate() error {
	for uid, entries := range b.Pods {
		if uid == "" {
			return fmt.Errorf("%w: batch names an empty pod UID", errInvalidState)
		}
		for i, e := range entries {
			if e.PodUID != uid {
				return fmt.Errorf("%w: entry %d of pod %s has pod UID %q", errInvalidState, i, uid, e.PodUID)
			}
		}
		if err := (State{Entries: entries}).validate(); err != nil {
			return err
		}
	}
	for _, r := range b.Unregistered {
		if r == "" {
			return fmt.Errorf("%w: unregistered resource with an empty name", errInvalidState)
		}
	}
	return State{RegisteredDevices: b.Registered}.validate()
}

// errNeedsSnapshot refuses an Append before this Journal wrote a snapshot,
// or after a failed write left the end of the file in doubt.
var errNeedsSnapshot = errors.New("the checkpoint needs a snapshot before changes can be appended")

// NeedsCompaction reports whether the next write should be Compact: no
// snapshot was written by this Journal yet (the file may be of format 1, or
// record an earlier boot), a write failed, or the appended frames are larger
// than twice the snapshot and 1 MiB.
func (j *Journal) NeedsCompaction() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.f == nil || j.size-j.snapshotSize > max(2*j.snapshotSize, 1<<20)
}

// Compact atomically and durably replaces the checkpoint with a snapshot of
// state, stamped with the current boot ID and time. When it returns nil the
// snapshot is on disk (file and directory fsynced) and Append may follow; on
// error the previous file is left intact. State that no reader would accept
// is refused without touching the file.
func (j *Journal) Compact(state State) error {
	if err := state.validate(); err != nil {
		return fmt.Errorf("writing checkpoint %s: %w", j.path, err)
	}
	blob := encodeSnapshot(state, j.bootID, j.clock.Now())
	j.mu.Lock()
	defer j.mu.Unlock()
	// The handle is replaced: whatever it wrote was synced or is covered by
	// this snapshot, so failing to close it loses nothing.
	_ = j.closeLocked()
	if err := writeFileAtomic(j.path, blob); err != nil {
		return fmt.Errorf("writing checkpoint %s: %w", j.path, err)
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening checkpoint %s for appending: %w", j.path, err)
	}
	j.f, j.size, j.snapshotSize = f, int64(len(blob)), int64(len(blob))
	return nil
}

// Append appends b to the checkpoint: one frame, written with one write and,
// if sync, fdatasync'd (which also makes the unsynced frames before it
// durable). An unsynced frame survives the process being killed, not a
// power cut: Sync or the next synced Append makes it durable. It needs a
// snapshot written by this Journal (NeedsCompaction); after a failure the
// file may end in a partial frame, so the next write must be Compact.
func (j *Journal) Append(b Batch, sync bool) error {
	if err := b.validate(); err != nil {
		return fmt.Errorf("appending to checkpoint %s: %w", j.path, err)
	}
	frame := encodeBatch(b, j.clock.Now())
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("appending to checkpoint %s: %w", j.path, errNeedsSnapshot)
	}
	if _, err := j.f.Write(frame); err != nil {
		return fmt.Errorf("appending to checkpoint %s: %w", j.path, errors.Join(err, j.closeLocked()))
	}
	j.size += int64(len(frame))
	if sync {
		crashpoint.Hit(crashpoint.JournalAppended)
		return j.syncLocked()
	}
	return nil
}

// Sync makes the appended frames durable (fdatasync).
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("syncing checkpoint %s: %w", j.path, errNeedsSnapshot)
	}
	return j.syncLocked()
}

func (j *Journal) syncLocked() error {
	if err := unix.Fdatasync(int(j.f.Fd())); err != nil {
		return fmt.Errorf("syncing checkpoint %s: %w", j.path, errors.Join(err, j.closeLocked()))
	}
	return nil
}

// Close releases the file; later writes start with Compact.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closeLocked()
}

func (j *Journal) closeLocked() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// TornTail describes the end of a checkpoint file that held a partial
// frame: a write the process did not see finish (it crashed or was killed
// during it, or the write failed), so nobody was told it was durable.
type TornTail struct {
	// Offset is where the partial frame starts; everything before it was read.
	Offset int64
	// Bytes is the length of the partial frame.
	Bytes int64
	// SavedPath is the file the whole checkpoint was copied to, as read,
	// for inspection; empty if saving it failed (SaveErr).
	SavedPath string
	// SaveErr is the failure to save the copy, if any.
	SaveErr error
}

// Read loads the checkpoint, of format version 2 or 1.
//
// If there is no file it returns an error matching ErrNotFound. If the file
// cannot be read, decoded or verified, it is moved aside to
// "<path>.corrupt-<UTC timestamp>" and Read returns a *CorruptError, as
// Store.Read: a bad snapshot, a frame that fails its checksum with more
// frames after it, or a frame that decodes to invalid data.
//
// A partial last frame (shorter than its header says, or failing its
// checksum with nothing after it) is a write that never finished: what came
// before it is returned, and Checkpoint.TornTail reports it, with a copy of
// the file saved as "<path>.torn-<UTC timestamp>". The next Compact drops it
// from the file.
func (j *Journal) Read() (*Checkpoint, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	cp, err := readOrQuarantine(j.path, j.clock.Now, func(blob []byte) (*Checkpoint, error) {
		switch {
		case len(blob) >= len(journalMagic) && bytes.HasPrefix(blob, []byte(journalMagic[:len(journalMagic)-1])) && !bytes.HasPrefix(blob, []byte(journalMagic)):
			return nil, &decodeError{reason: ReasonUnknownVersion, err: fmt.Errorf("format version %d is not supported (this agent reads versions %d and %d)", blob[len(journalMagic)-1], Version, JournalVersion)}
		case bytes.HasPrefix(blob, []byte(journalMagic)):
			jd, err := decodeJournal(blob)
			if err != nil {
				return nil, err
			}
			cp := &Checkpoint{State: jd.state, BootID: jd.bootID, WrittenAt: jd.writtenAt, Format: JournalVersion}
			if jd.tornAt >= 0 {
				cp.TornTail = &TornTail{Offset: jd.tornAt, Bytes: int64(len(blob)) - jd.tornAt}
				cp.TornTail.SavedPath, cp.TornTail.SaveErr = saveCopy(j.path, ".torn-", blob, j.clock.Now())
			}
			return cp, nil
		default:
			return decodeVersion1(blob)
		}
	})
	if err != nil {
		return nil, err
	}
	cp.Rebooted = cp.BootID != j.bootID
	return cp, nil
}

// saveCopy writes blob, durably, to "<path><infix><UTC timestamp>" (with a
// numeric suffix if taken) and returns that path.
func saveCopy(path, infix string, blob []byte, now time.Time) (string, error) {
	target, err := freeName(path + infix + now.UTC().Format(quarantineTimeFormat))
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(target, blob); err != nil {
		return "", err
	}
	return target, nil
}
