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
)

// ErrNotFound is returned (wrapped) when there is no checkpoint file.
var ErrNotFound = errors.New("checkpoint not found")

// ErrCorrupt matches every *CorruptError with errors.Is.
var ErrCorrupt = errors.New("checkpoint corrupt")

// CorruptReason classifies why a checkpoint file could not be used. The
// values are CamelCase so they can serve as event reasons and metric labels.
type CorruptReason string

const (
	// ReasonUnreadable means the file exists but reading it failed (for
	// example a permission or I/O error, or the path is a directory).
	ReasonUnreadable CorruptReason = "Unreadable"
	// ReasonEmpty means the file has no content, or only white space.
	ReasonEmpty CorruptReason = "Empty"
	// ReasonTruncated means the file ends inside its JSON document.
	ReasonTruncated CorruptReason = "Truncated"
	// ReasonNotJSON means the file is not a JSON document.
	ReasonNotJSON CorruptReason = "NotJSON"
	// ReasonUnknownFormat means the file is JSON but not of the expected
	// shape, e.g. another program's file or fields this version does not know.
	ReasonUnknownFormat CorruptReason = "UnknownFormat"
	// ReasonUnknownVersion means the file declares a format version this
	// code cannot read, for example one written by a newer agent.
	ReasonUnknownVersion CorruptReason = "UnknownVersion"
	// ReasonChecksumMismatch means the data does not match the checksum
	// recorded with it.
	ReasonChecksumMismatch CorruptReason = "ChecksumMismatch"
	// ReasonInvalidData means the checksum matched but the data breaks an
	// invariant no correct writer violates (e.g. an empty pod UID).
	ReasonInvalidData CorruptReason = "InvalidData"
)

// CorruptError reports a checkpoint file that exists but cannot be used.
// errors.Is(err, ErrCorrupt) is true for it.
type CorruptError struct {
	// Path is the checkpoint file that was read.
	Path string
	// QuarantinedPath is where the file was moved to keep its bytes for
	// inspection. It is empty when the file was not moved: either moving it
	// failed (Err then includes that failure too), or the file is not ours to
	// move (a kubelet checkpoint).
	QuarantinedPath string
	// Reason classifies the failure.
	Reason CorruptReason
	// Err is the underlying failure.
	Err error
}

// Error implements error.
func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("checkpoint is corrupt (%s): %v", e.Reason, e.Err)
	if e.Path != "" {
		msg = fmt.Sprintf("checkpoint %s is corrupt (%s): %v", e.Path, e.Reason, e.Err)
	}
	if e.QuarantinedPath != "" {
		msg += "; moved to " + e.QuarantinedPath
	}
	return msg
}

// Unwrap returns the underlying failure.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// asCorrupt turns a decoding failure into a *CorruptError for path.
func asCorrupt(path string, err error) *CorruptError {
	var de *decodeError
	if errors.As(err, &de) {
		return &CorruptError{Path: path, Reason: de.reason, Err: de.err}
	}
	return &CorruptError{Path: path, Reason: ReasonUnknownFormat, Err: err}
}
