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
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"

	"k8s.io/utils/dump"
)

// KubeletFileName is the name of the kubelet's device manager checkpoint in
// its device plugin directory (/var/lib/kubelet/device-plugins).
const KubeletFileName = "kubelet_internal_checkpoint"

// PodDevicesEntry is one allocation in the kubelet's checkpoint format. Its
// name, field names and field order are the kubelet's and must not change:
// they are printed into the data the kubelet's checksum is computed over.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

// checkpointData is the kubelet's checksummed checkpoint data; name, fields
// and field order are part of the checksum.
type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// kubeletChecksum mirrors the kubelet's checksum.Checksum (a uint64, written
// as a JSON number). It is not itself part of the hashed data.
type kubeletChecksum uint64

// kubeletData is the kubelet's checkpoint file (its checkpoint.Data):
//
//	{"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{...}},"Checksum":<uint64>}
type kubeletData struct {
	Data     checkpointData
	Checksum kubeletChecksum
}

// checksumKubelet computes the kubelet's checksum of d: FNV-32a, widened to
// 64 bits, over the spew "%#v" dump that k8s.io/kubernetes/pkg/util/hash.DeepHashObject
// writes (k8s.io/utils/dump.ForHash, whose configuration is frozen for this purpose).
func checksumKubelet(d checkpointData) kubeletChecksum {
	h := fnv.New32a()
	_, _ = io.WriteString(h, dump.ForHash(d))
	return kubeletChecksum(h.Sum32())
}

// ToKubelet converts state to the kubelet's checkpoint data. PodNamespace and
// PodName are dropped: the kubelet's format has no place for them. Slices and
// maps are shared with state, not copied.
func ToKubelet(state State) (entries []PodDevicesEntry, registeredDevices map[string][]string) {
	if state.Entries != nil {
		entries = make([]PodDevicesEntry, 0, len(state.Entries))
	}
	for _, e := range state.Entries {
		entries = append(entries, PodDevicesEntry{
			PodUID:        e.PodUID,
			ContainerName: e.ContainerName,
			ResourceName:  e.ResourceName,
			DeviceIDs:     e.DeviceIDs,
			AllocResp:     e.AllocResp,
		})
	}
	return entries, state.RegisteredDevices
}

// FromKubelet converts the kubelet's checkpoint data to a State. The entries
// have an empty PodNamespace and PodName. Slices and maps are shared, not copied.
func FromKubelet(entries []PodDevicesEntry, registeredDevices map[string][]string) State {
	state := State{RegisteredDevices: registeredDevices}
	if entries != nil {
		state.Entries = make([]Entry, 0, len(entries))
	}
	for _, e := range entries {
		state.Entries = append(state.Entries, Entry{
			PodUID:        e.PodUID,
			ContainerName: e.ContainerName,
			ResourceName:  e.ResourceName,
			DeviceIDs:     e.DeviceIDs,
			AllocResp:     e.AllocResp,
		})
	}
	return state
}

// MarshalKubelet renders state as a kubelet_internal_checkpoint file, byte
// for byte what the kubelet writes for the same data, checksum included.
func MarshalKubelet(state State) ([]byte, error) {
	entries, registered := ToKubelet(state)
	cp := kubeletData{Data: checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}}
	cp.Checksum = checksumKubelet(cp.Data)
	blob, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encoding kubelet checkpoint: %w", err)
	}
	return blob, nil
}

// UnmarshalKubelet parses a kubelet_internal_checkpoint file and verifies its
// checksum exactly as the kubelet does (lenient JSON decoding, then the
// checksum). Failures are a *CorruptError with an empty Path.
func UnmarshalKubelet(blob []byte) (State, error) {
	if len(bytes.TrimSpace(blob)) == 0 {
		return State{}, asCorrupt("", corrupt(ReasonEmpty, "file is empty (%d bytes)", len(blob)))
	}
	var cp kubeletData
	if err := json.Unmarshal(blob, &cp); err != nil {
		return State{}, asCorrupt("", classifyJSONError(blob, err))
	}
	if got := checksumKubelet(cp.Data); got != cp.Checksum {
		return State{}, asCorrupt("", corrupt(ReasonChecksumMismatch, "kubelet checksum mismatch: file records %d, data hashes to %d", cp.Checksum, got))
	}
	return FromKubelet(cp.Data.PodDeviceEntries, cp.Data.RegisteredDevices), nil
}

// ReadKubeletFile reads and verifies a kubelet_internal_checkpoint file. A
// missing file gives an error matching ErrNotFound, an unusable one a
// *CorruptError. The file belongs to the kubelet and is never moved.
func ReadKubeletFile(path string) (State, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, fmt.Errorf("reading kubelet checkpoint %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return State{}, &CorruptError{Path: path, Reason: ReasonUnreadable, Err: err}
	}
	state, err := UnmarshalKubelet(blob)
	if err != nil {
		var cerr *CorruptError
		if errors.As(err, &cerr) {
			cerr.Path = path
		}
		return State{}, err
	}
	return state, nil
}

// WriteKubeletFile atomically and durably writes state to path in the
// kubelet's format (mode 0600, like the kubelet). The directory must exist.
// It refuses the same invalid state as Store.Write.
func WriteKubeletFile(path string, state State) error {
	if err := state.validate(); err != nil {
		return fmt.Errorf("writing kubelet checkpoint %s: %w", path, err)
	}
	blob, err := MarshalKubelet(state)
	if err != nil {
		return fmt.Errorf("writing kubelet checkpoint %s: %w", path, err)
	}
	if err := writeFileAtomic(path, blob); err != nil {
		return fmt.Errorf("writing kubelet checkpoint %s: %w", path, err)
	}
	return nil
}
