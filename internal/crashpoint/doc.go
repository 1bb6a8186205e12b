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

// Package crashpoint names the points of the allocation and free paths at which the crash
// harness (test/crash) kills the agent with SIGKILL, to prove that every kill there converges
// after a restart.
//
// Hit is a no-op unless the binary is built with the build tag crashpoint (`go build -tags
// crashpoint`), which only the harness does: production binaries carry an empty function the
// compiler inlines away. In a crashpoint build, KUBEDEVICE_CRASHPOINT=<name>:<n> makes the n-th
// Hit(<name>) of the process write one line to stderr ("crashpoint: <name> hit <n>, SIGKILL")
// and kill the process with SIGKILL: no deferred function, no flush, no graceful stop runs.
package crashpoint

// The named points, in the order an allocation and a free pass them.
const (
	// AllocReserved: devices reserved for a container in memory, before the plugin's Allocate.
	AllocReserved = "alloc-reserved"
	// AllocPluginReturned: the plugin's Allocate answered, before the allocation is committed.
	AllocPluginReturned = "alloc-plugin-returned"
	// JournalAppended: an allocation's frame written to the checkpoint journal, before its
	// fdatasync.
	JournalAppended = "journal-appended"
	// SnapshotBeforeRename: a checkpoint snapshot written and fsync'd to its temporary file,
	// before the rename over the checkpoint.
	SnapshotBeforeRename = "snapshot-before-rename"
	// CheckpointWritten: an allocation committed and durable in the checkpoint, before the
	// core returns it (and before the DeviceAllocation is written).
	CheckpointWritten = "checkpoint-written"
	// DeviceAllocationWritten: a pod's DeviceAllocation status written with its devices.
	DeviceAllocationWritten = "deviceallocation-written"
	// ReleaseFreed: the devices of ended pods freed and their free appended to the checkpoint
	// (not synced), before their DeviceAllocations are released.
	ReleaseFreed = "release-freed"
	// ReleaseMarked: a DeviceAllocation marked Released, before it is deleted.
	ReleaseMarked = "release-marked"
)

// Points lists every named point.
var Points = []string{
	AllocReserved, AllocPluginReturned, JournalAppended, SnapshotBeforeRename,
	CheckpointWritten, DeviceAllocationWritten, ReleaseFreed, ReleaseMarked,
}

// EnvVar is the environment variable a crashpoint build reads: <name>:<n>.
const EnvVar = "KUBEDEVICE_CRASHPOINT"
