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
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the on-disk format version that Store.Write produces and that
// Store.Read accepts.
const Version = 1

// checksumPrefix names the checksum algorithm in the file.
const checksumPrefix = "sha256:"

// fileV1 is the on-disk envelope of format version 1:
//
//	{"version":1,"checksum":"sha256:<hex>","data":{...}}
//
// The checksum is SHA-256 over the exact bytes of the data member, which the
// writer produces with encoding/json (compact, struct fields in declaration
// order, map keys sorted). The reader hashes the bytes as found, so no
// re-encoding is involved in verification.
type fileV1 struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// dataV1 is the checksummed payload of format version 1. These types are
// the file format: they are separate from State so that a change to the Go
// model cannot silently change what is on disk.
type dataV1 struct {
	BootID            string              `json:"bootID"`
	WrittenAt         time.Time           `json:"writtenAt"`
	Entries           []entryV1           `json:"entries"`
	RegisteredDevices map[string][]string `json:"registeredDevices"`
}

// entryV1 is an Entry with the JSON names of format 1; the two convert
// into each other.
type entryV1 struct {
	PodUID        string         `json:"podUID"`
	PodNamespace  string         `json:"podNamespace,omitempty"`
	PodName       string         `json:"podName,omitempty"`
	ContainerName string         `json:"containerName"`
	ResourceName  string         `json:"resourceName"`
	DeviceIDs     DevicesPerNUMA `json:"deviceIDs"`
	AllocResp     []byte         `json:"allocResp"`
}

// encodeV1 renders state as a version 1 file.
func encodeV1(state State, bootID string, writtenAt time.Time) ([]byte, error) {
	d := dataV1{
		BootID:            bootID,
		WrittenAt:         writtenAt.UTC(),
		RegisteredDevices: state.RegisteredDevices,
	}
	if state.Entries != nil { // keep nil and empty apart so a round trip is exact
		d.Entries = make([]entryV1, 0, len(state.Entries))
	}
	for _, e := range state.Entries {
		d.Entries = append(d.Entries, entryV1(e))
	}
	payload, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint data: %w", err)
	}
	blob, err := json.Marshal(fileV1{Version: Version, Checksum: checksumOf(payload), Data: payload})
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint: %w", err)
	}
	return blob, nil
}

func checksumOf(payload []byte) string {
	sum := sha256.Sum256(payload)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

// decoded is a successfully decoded file of any supported version.
type decoded struct {
	state     State
	bootID    string
	writtenAt time.Time
}

// decodeError is a decoding failure with its classification.
type decodeError struct {
	reason CorruptReason
	err    error
}

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

func corrupt(reason CorruptReason, format string, args ...any) error {
	return &decodeError{reason: reason, err: fmt.Errorf(format, args...)}
}

// decodeVersion1 decodes a format-1 file into a Checkpoint (Rebooted is the
// reader's to set).
func decodeVersion1(blob []byte) (*Checkpoint, error) {
	d, err := decode(blob)
	if err != nil {
		return nil, err
	}
	return &Checkpoint{State: d.state, BootID: d.bootID, WrittenAt: d.writtenAt, Format: Version}, nil
}

// decode parses a checkpoint file of any supported version, verifying its
// checksum. Every failure is a *decodeError.
func decode(blob []byte) (*decoded, error) {
	if len(bytes.TrimSpace(blob)) == 0 {
		return nil, corrupt(ReasonEmpty, "file is empty (%d bytes)", len(blob))
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(blob, &probe); err != nil {
		return nil, classifyJSONError(blob, err)
	}
	rawVersion, ok := probe["version"]
	if !ok {
		return nil, corrupt(ReasonUnknownFormat, "no version field: not a kubedevice checkpoint")
	}
	var version int
	if err := json.Unmarshal(rawVersion, &version); err != nil {
		return nil, corrupt(ReasonUnknownFormat, "decoding version %s: %w", rawVersion, err)
	}
	switch version {
	case 1:
		return decodeV1(blob)
	default:
		return nil, corrupt(ReasonUnknownVersion, "format version %d is not supported (this agent reads version %d)", version, Version)
	}
}

func decodeV1(blob []byte) (*decoded, error) {
	var f fileV1
	if err := strictUnmarshal(blob, &f); err != nil {
		return nil, corrupt(ReasonUnknownFormat, "decoding version 1 envelope: %w", err)
	}
	if len(f.Data) == 0 || !bytes.HasPrefix(bytes.TrimSpace(f.Data), []byte("{")) {
		return nil, corrupt(ReasonUnknownFormat, "version 1 file has no data object")
	}
	if got := checksumOf(f.Data); got != f.Checksum {
		return nil, corrupt(ReasonChecksumMismatch, "checksum mismatch: file records %q, data hashes to %q", f.Checksum, got)
	}
	var d dataV1
	if err := strictUnmarshal(f.Data, &d); err != nil {
		return nil, corrupt(ReasonUnknownFormat, "decoding version 1 data: %w", err)
	}
	out := &decoded{
		bootID:    d.BootID,
		writtenAt: d.WrittenAt,
		state:     State{RegisteredDevices: d.RegisteredDevices},
	}
	if d.Entries != nil {
		out.state.Entries = make([]Entry, 0, len(d.Entries))
	}
	for _, e := range d.Entries {
		out.state.Entries = append(out.state.Entries, Entry(e))
	}
	if err := out.state.validate(); err != nil {
		return nil, &decodeError{reason: ReasonInvalidData, err: err}
	}
	return out, nil
}

// strictUnmarshal decodes exactly one JSON value into v, rejecting unknown
// fields, so that a file of another shape is not mistaken for ours.
func strictUnmarshal(blob []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(blob))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// classifyJSONError tells a truncated file (the input ends inside a JSON
// value) from one that is not JSON at all or is JSON of another shape.
func classifyJSONError(blob []byte, err error) error {
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		if syntaxErr.Offset >= int64(len(blob)) {
			return &decodeError{reason: ReasonTruncated, err: fmt.Errorf("file ends inside a JSON value after %d bytes: %w", len(blob), err)}
		}
		return &decodeError{reason: ReasonNotJSON, err: fmt.Errorf("file is not JSON: %w", err)}
	}
	return &decodeError{reason: ReasonUnknownFormat, err: fmt.Errorf("file is not a JSON object: %w", err)}
}
