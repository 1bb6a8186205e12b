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

// Package checkpoint stores the node agent's device state on disk: which
// devices each pod's containers hold and which resources were registered.
//
// Two formats are supported.
//
// The agent's own format (Store) is versioned JSON whose payload is protected
// by a SHA-256 checksum and records the node's boot ID and the write time, so
// a restart of the agent can be told from a reboot of the node. Files are
// written atomically (temporary file, fsync, rename, fsync of the directory)
// with mode 0600. A file that cannot be read or decoded is never replaced by
// empty state in silence: it is moved aside (quarantined) and Read returns a
// *CorruptError, so the agent can report it and rebuild its state.
//
// The kubelet's format (MarshalKubelet, UnmarshalKubelet, ReadKubeletFile,
// WriteKubeletFile) is the device manager's kubelet_internal_checkpoint,
// byte for byte, including its FNV-32a checksum over the spew dump of the
// data. That checksum prints Go type names, which is why this package is
// named checkpoint and declares the kubelet's PodDevicesEntry,
// DevicesPerNUMA and checkpointData types with their exact fields.
package checkpoint
