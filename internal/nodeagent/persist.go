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

package nodeagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// reallocateSuffix names the file, next to the checkpoint, that lists the
// allocations restored across a node reboot whose plugin Allocate has not
// run again yet (see RestoreCheckpoint).
const reallocateSuffix = ".reallocate"

// reasonTornTail labels kubedevice_checkpoint_corrupt_total for a
// checkpoint whose last write never finished (RestoreResult.TornTail).
const reasonTornTail = "TornTail"

// errAlreadyRestored refuses a second restore: the state is live.
var errAlreadyRestored = errors.New("the checkpoint was already restored (RestoreCheckpoint runs once, before Start)")

// RestoreResult is what RestoreCheckpoint found.
type RestoreResult struct {
	// Rebooted is true when the checkpoint was written during an earlier
	// boot of the node: no container that held its devices is running.
	Rebooted bool
	// Allocations is the number of pods whose allocations were restored.
	Allocations int
	// BootID is the boot ID recorded in the checkpoint that was read; empty
	// when there was none (or it was corrupt).
	BootID string
	// CurrentBootID is the node's boot ID now, which the next write records.
	CurrentBootID string
	// TornTail, when set, reports that the checkpoint ended in a write that
	// never finished (the agent stopped during it): what was written before
	// it was restored, and a copy of the file was saved.
	TornTail *checkpoint.TornTail
	// MigratedFrom is the checkpoint in the plugin directory that was read
	// because the state directory had none (an agent upgraded from one that
	// kept its state there); empty otherwise.
	MigratedFrom string
}

// defaultAllocationConfig fills in the allocation defaults of cfg and checks
// its topology settings.
func defaultAllocationConfig(cfg *Config) error {
	if cfg.StateDir == "" {
		cfg.StateDir = cfg.PluginDir
	}
	if cfg.CheckpointPath == "" {
		cfg.CheckpointPath = filepath.Join(cfg.StateDir, checkpoint.DefaultFileName)
	}
	if cfg.BootIDPath == "" {
		cfg.BootIDPath = checkpoint.DefaultBootIDPath
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/"
	}
	if cfg.TopologyPolicy == "" {
		cfg.TopologyPolicy = topology.PolicyNone
	}
	if _, err := topology.ParsePolicy(string(cfg.TopologyPolicy)); err != nil {
		return fmt.Errorf("creating device manager: %w", err)
	}
	if n := cfg.TopologyPolicyOptions.MaxAllowableNUMANodes; n != 0 && n < topology.DefaultMaxAllowableNUMANodes {
		return fmt.Errorf("creating device manager: %s %d is below the minimum %d", topology.OptionMaxAllowableNUMANodes, n, topology.DefaultMaxAllowableNUMANodes)
	}
	if cfg.TopologyScope == "" {
		cfg.TopologyScope = topology.ScopeContainer
	}
	if _, err := topology.ParseScope(string(cfg.TopologyScope)); err != nil {
		return fmt.Errorf("creating device manager: %w", err)
	}
	if cfg.AllocateTimeout <= 0 {
		cfg.AllocateTimeout = defaultAllocateTimeout
	}
	if cfg.PreferredAllocationTimeout <= 0 {
		cfg.PreferredAllocationTimeout = defaultGetPreferredAllocationTimeout
	}
	if cfg.PreStartTimeout <= 0 {
		cfg.PreStartTimeout = defaultPreStartContainerTimeout
	}
	return nil
}

// checkpointStoresLocked opens the checkpoint and reallocation files on
// first use (this reads the boot ID and creates the directory). The caller
// holds m.ckptMu.
func (m *Manager) checkpointStoresLocked() (*checkpoint.Journal, *checkpoint.Store, error) {
	if m.ckptStore == nil {
		main, stale, err := m.openCheckpoint(m.cfg.CheckpointPath)
		if err != nil {
			return nil, nil, fmt.Errorf("opening device manager checkpoint: %w", err)
		}
		m.ckptStore, m.staleStore = main, stale
	}
	return m.ckptStore, m.staleStore, nil
}

// openCheckpoint opens the checkpoint at path and its reallocation file.
func (m *Manager) openCheckpoint(path string) (*checkpoint.Journal, *checkpoint.Store, error) {
	opts := checkpoint.Options{BootIDPath: m.cfg.BootIDPath, Clock: m.clock}
	journal, err := checkpoint.OpenJournal(path, opts)
	if err != nil {
		return nil, nil, err
	}
	stale, err := checkpoint.New(path+reallocateSuffix, opts)
	return journal, stale, err
}

// persist makes the state as of the call durable unless a write that
// started after the call already covered it: concurrent callers share
// writes (group commit: while one writes, the others queue on ckptMu, and
// the next one writes everything they changed at once) and never hold m.mu
// during the disk I/O. A write appends to the journal the new state of the
// pods and resources changed since the last write (fdatasync'd); it is a
// snapshot of the whole state instead when the journal asks for compaction,
// when the state was replaced (restored, rebuilt, imported) and after a
// failed write. Before the checkpoint was restored it writes nothing, so a
// file not read yet is never overwritten.
func (m *Manager) persist() error { return m.write(true) }

// persistUnsynced is persist without waiting for the disk, for frees: the
// frame is written (it survives the agent being killed), and the next
// durable write, an allocation's, flushes it with its own. A free lost to a
// power cut only keeps an ended pod's devices until the ended pods are
// freed again (the agent does so before it starts; the node rebooted, so no
// container runs). A snapshot is always durable.
func (m *Manager) persistUnsynced() error { return m.write(false) }

func (m *Manager) write(durable bool) error {
	m.mu.Lock()
	target, restored := m.stateSeq, m.restored
	m.mu.Unlock()
	if !restored {
		return nil
	}
	m.ckptMu.Lock()
	defer m.ckptMu.Unlock()
	if m.ckptSynced >= target || !durable && m.ckptWritten >= target {
		return nil
	}
	store, _, err := m.checkpointStoresLocked()
	if err != nil {
		return err
	}
	if m.ckptWritten >= target {
		// Written by an unsynced write: flush it.
		if err := store.Sync(); err != nil {
			return m.writeFailed(err)
		}
		m.ckptSynced = m.ckptWritten
		return nil
	}
	compact := store.NeedsCompaction()
	m.mu.Lock()
	seq := m.stateSeq
	var state checkpoint.State
	var batch checkpoint.Batch
	if compact || m.needSnapshot {
		compact, state = true, m.checkpointStateLocked()
	} else {
		batch = m.checkpointBatchLocked()
	}
	m.needSnapshot = false
	clear(m.dirtyPods)
	clear(m.dirtyResources)
	m.mu.Unlock()
	if compact {
		err, durable = store.Compact(state), true
	} else {
		err = store.Append(batch, durable)
	}
	if err != nil {
		return m.writeFailed(err)
	}
	m.metrics.checkpointWrites.WithLabelValues(resultSuccess).Inc()
	m.ckptWritten = seq
	if durable {
		m.ckptSynced = seq
	}
	m.mu.Lock()
	m.ckptInfo = CheckpointInfo{BootID: store.BootID(), LastWrite: m.clock.Now()}
	m.mu.Unlock()
	return nil
}

// writeFailed counts a failed write and returns its error. What was taken
// for it is written by the next write, a snapshot.
func (m *Manager) writeFailed(err error) error {
	m.mu.Lock()
	m.needSnapshot = true
	m.mu.Unlock()
	m.metrics.checkpointWrites.WithLabelValues(resultError).Inc()
	return err
}

// persistLogged is persist for callers with nobody to return the error to.
func (m *Manager) persistLogged(logger klog.Logger) {
	if err := m.persist(); err != nil {
		logger.Error(err, "Writing the device manager checkpoint")
	}
}

// checkpointStateLocked is what the checkpoint records: every committed
// allocation, and every resource with the IDs of all its devices (the
// kubelet records the healthy ones only and rewrites on every health
// change; the IDs serve only to restore the resource).
func (m *Manager) checkpointStateLocked() checkpoint.State {
	state := checkpoint.State{
		Entries:           m.pods.Entries(),
		RegisteredDevices: make(map[string][]string, len(m.resources)),
	}
	for name, r := range m.resources {
		state.RegisteredDevices[name] = sets.List(r.registeredIDs())
	}
	return state
}

// checkpointBatchLocked is what changed since the last write: the committed
// entries of each changed pod and the device IDs of each changed resource,
// copied at the cost of what changed alone.
func (m *Manager) checkpointBatchLocked() checkpoint.Batch {
	var b checkpoint.Batch
	if m.dirtyPods.Len() > 0 {
		b.Pods = make(map[string][]checkpoint.Entry, m.dirtyPods.Len())
		for uid := range m.dirtyPods {
			b.Pods[uid] = m.pods.PodEntries(uid)
		}
	}
	for name := range m.dirtyResources {
		r := m.resources[name]
		if r == nil {
			b.Unregistered = append(b.Unregistered, name)
			continue
		}
		if b.Registered == nil {
			b.Registered = make(map[string][]string)
		}
		b.Registered[name] = sets.List(r.registeredIDs())
	}
	return b
}

// podChangedLocked records that the committed allocations of a pod changed.
func (m *Manager) podChangedLocked(uid string) {
	m.dirtyPods.Insert(uid)
	m.stateSeq++
}

// resourceChangedLocked records that the registered devices of a resource
// changed, or that it was removed.
func (m *Manager) resourceChangedLocked(name string) {
	m.dirtyResources.Insert(name)
	m.stateSeq++
}

// stateReplacedLocked records a change of the whole state: the next write is
// a snapshot.
func (m *Manager) stateReplacedLocked() {
	m.needSnapshot = true
	m.stateSeq++
}

// restoreEntriesLocked adds entries to the committed state and returns those
// restored and the error of those skipped.
func (m *Manager) restoreEntriesLocked(entries []poddevices.Entry) (restored []poddevices.Entry, err error) {
	_, err = m.pods.FromEntries(entries)
	resources := sets.New[string]()
	for _, e := range entries {
		if m.pods.ContainerDevices(e.PodUID, e.ContainerName, e.ResourceName) == nil {
			continue // skipped, reported in err
		}
		restored = append(restored, e)
		resources.Insert(e.ResourceName)
		m.podRefs[e.PodUID] = poddevices.PodRef{UID: e.PodUID, Namespace: e.PodNamespace, Name: e.PodName}
	}
	m.stateReplacedLocked()
	if resources.Len() > 0 {
		m.notifyLocked(sets.List(resources)...)
	}
	return restored, err
}

// RestoreCheckpoint reads the checkpoint and restores its allocations and
// its resources (RestoreRegisteredResources: unallocatable until their
// plugin registers again; a pod asking for one meanwhile gets a retryable
// PluginUnavailable refusal). Call it once, before Start (Start calls it
// otherwise).
//
// No checkpoint: empty state, no error. A corrupt checkpoint: the file is
// quarantined, kubedevice_checkpoint_corrupt_total counted, and the error
// returned wraps the *checkpoint.CorruptError (errors.As works); the state is
// left empty and allocation is refused (retryable) until RestoreAllocations
// rebuilds it, so no device a lost allocation held is handed to another pod.
//
// When the checkpoint was written during an earlier boot (Rebooted), no
// container is running any more: the restored allocations keep their
// devices for their pods, but the plugin must see Allocate again, so
// AllocatePod (or Allocate) for such a pod runs Allocate with the same
// device IDs and replaces the recorded response. Which allocations still
// wait for that is itself kept in a file next to the checkpoint
// (<checkpoint>.reallocate), so an agent restart before it happened (the
// checkpoint then carries the new boot ID) does not forget it.
func (m *Manager) RestoreCheckpoint(ctx context.Context) (RestoreResult, error) {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	if m.restored {
		m.mu.Unlock()
		return RestoreResult{}, fmt.Errorf("restoring device manager checkpoint: %w", errAlreadyRestored)
	}
	m.restored = true
	m.mu.Unlock()

	var res RestoreResult
	cp, source, sourceStale, err := m.readCheckpoint(logger, &res)
	if err != nil {
		return res, fmt.Errorf("restoring device manager checkpoint: %w", err)
	}
	if cp == nil {
		return res, nil
	}
	res.BootID, res.Rebooted, res.TornTail = cp.BootID, cp.Rebooted, cp.TornTail
	allStale := cp.Rebooted
	var stale []poddevices.Entry
	if !cp.Rebooted {
		stale, allStale = m.readStaleMarks(logger, sourceStale)
	}

	m.mu.Lock()
	restored, ferr := m.restoreEntriesLocked(cp.State.Entries)
	if allStale {
		stale = restored
	}
	for _, e := range stale {
		if m.pods.ContainerDevices(e.PodUID, e.ContainerName, e.ResourceName) != nil {
			m.markStaleLocked(e.PodUID, e.ContainerName, e.ResourceName)
		}
	}
	res.Allocations = m.pods.Pods().Len()
	m.ckptInfo = CheckpointInfo{BootID: cp.BootID, LastWrite: cp.WrittenAt}
	m.mu.Unlock()

	m.RestoreRegisteredResources(cp.State.RegisteredDevices)
	if ferr != nil {
		logger.Error(ferr, "Skipped allocations of the checkpoint that cannot be restored")
	}
	var serr error
	if allStale || res.MigratedFrom != "" {
		if serr = m.persistStale(); serr != nil {
			logger.Error(serr, "Writing the list of allocations to run Allocate for again")
		}
	}
	if cp.Format != checkpoint.JournalVersion || cp.TornTail != nil || res.MigratedFrom != "" {
		m.convertCheckpoint(logger, cp, res.MigratedFrom, serr)
	}
	logger.Info("Restored device manager checkpoint", "path", source, "pods", res.Allocations,
		"bootID", cp.BootID, "writtenAt", cp.WrittenAt, "rebooted", cp.Rebooted, "format", cp.Format)
	return res, nil
}

// readCheckpoint reads the checkpoint, or the one an earlier version left in
// the plugin directory (res.MigratedFrom), and returns it with the path read
// and the store of its reallocation file; nil if there is none. A corrupt
// checkpoint is counted and makes allocation wait for RestoreAllocations; a
// torn tail is counted and logged.
func (m *Manager) readCheckpoint(logger klog.Logger, res *RestoreResult) (*checkpoint.Checkpoint, string, *checkpoint.Store, error) {
	m.ckptMu.Lock()
	store, staleStore, err := m.checkpointStoresLocked()
	m.ckptMu.Unlock()
	if err != nil {
		return nil, "", nil, err
	}
	res.CurrentBootID = store.BootID()
	cp, err := store.Read()
	source := store.Path()
	if errors.Is(err, checkpoint.ErrNotFound) && m.legacyCheckpointPath() != "" {
		// An agent upgraded from one that kept its state in the plugin
		// directory: read it there, then write it here and remove it.
		cp, staleStore, err = m.readLegacyCheckpoint()
		source = m.legacyCheckpointPath()
		res.MigratedFrom = source
	}
	var cerr *checkpoint.CorruptError
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		res.MigratedFrom = ""
		logger.Info("No device manager checkpoint; starting with no allocations", "path", store.Path())
		return nil, "", nil, nil
	case errors.As(err, &cerr):
		m.metrics.checkpointCorrupt.WithLabelValues(string(cerr.Reason)).Inc()
		m.mu.Lock()
		m.rebuildPending = true
		m.mu.Unlock()
		return nil, "", nil, err
	case err != nil:
		return nil, "", nil, err
	}
	if t := cp.TornTail; t != nil {
		m.metrics.checkpointCorrupt.WithLabelValues(reasonTornTail).Inc()
		logger.Error(t.SaveErr, "The checkpoint ends in a write that never finished; restoring what was written before it",
			"path", source, "offset", t.Offset, "tornBytes", t.Bytes, "savedCopy", t.SavedPath)
	}
	return cp, source, staleStore, nil
}

// convertCheckpoint writes the restored state at once as a snapshot of the
// current format: a file of the previous format is converted, a torn tail
// dropped, a checkpoint migrated from the plugin directory written to the
// state directory and then (only once it and its reallocation file are
// durable here, staleErr nil) removed from there. If the write fails, the
// file read is left as it is, and the next write (or the next start) tries
// again; nothing is lost either way.
func (m *Manager) convertCheckpoint(logger klog.Logger, cp *checkpoint.Checkpoint, legacy string, staleErr error) {
	m.mu.Lock()
	m.stateReplacedLocked()
	m.mu.Unlock()
	if err := m.persist(); err != nil {
		logger.Error(err, "Converting the checkpoint to the current format; the file read is kept", "format", cp.Format)
		return
	}
	if legacy == "" || staleErr != nil {
		return
	}
	if err := removeLegacyCheckpoint(legacy); err != nil {
		logger.Error(err, "Removing the checkpoint migrated from the plugin directory", "path", legacy)
		return
	}
	logger.Info("Moved the checkpoint out of the plugin directory", "from", legacy, "to", m.cfg.CheckpointPath)
}

// legacyCheckpointPath is where earlier versions kept the checkpoint,
// <PluginDir>/kubedevice_checkpoint, or empty when that is CheckpointPath.
func (m *Manager) legacyCheckpointPath() string {
	legacy := filepath.Join(m.cfg.PluginDir, checkpoint.DefaultFileName)
	if filepath.Clean(legacy) == filepath.Clean(m.cfg.CheckpointPath) {
		return ""
	}
	return legacy
}

// readLegacyCheckpoint reads the checkpoint an agent kept in the plugin
// directory, and returns it with the store of its reallocation file. A
// corrupt one is quarantined there, as it would have been.
func (m *Manager) readLegacyCheckpoint() (*checkpoint.Checkpoint, *checkpoint.Store, error) {
	path := m.legacyCheckpointPath()
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("reading checkpoint %s: %w", path, checkpoint.ErrNotFound)
	}
	legacy, stale, err := m.openCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	cp, err := legacy.Read()
	return cp, stale, err
}

// removeLegacyCheckpoint removes the checkpoint and reallocation file of the
// plugin directory, durably.
func removeLegacyCheckpoint(path string) error {
	var errs []error
	for _, p := range []string{path, path + reallocateSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readStaleMarks returns the allocations the reallocation file lists. If it
// is corrupt (and quarantined), all is true: every restored allocation is
// treated as stale, since running Allocate again is safe and skipping it
// after a reboot is not.
func (m *Manager) readStaleMarks(logger klog.Logger, staleStore *checkpoint.Store) (stale []poddevices.Entry, all bool) {
	cp, err := staleStore.Read()
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return nil, false
	case err != nil:
		logger.Error(err, "Reading the list of allocations to run Allocate for again; doing it for every restored allocation")
		return nil, true
	}
	return cp.State.Entries, false
}

// persistStaleLogged is persistStale for callers with nobody to return the
// error to.
func (m *Manager) persistStaleLogged(logger klog.Logger) {
	if err := m.persistStale(); err != nil {
		logger.Error(err, "Writing the list of allocations to run Allocate for again")
	}
}

// persistStale writes the reallocation file: the allocations restored
// across a reboot whose Allocate has not run again.
func (m *Manager) persistStale() error {
	m.ckptMu.Lock()
	defer m.ckptMu.Unlock()
	_, staleStore, err := m.checkpointStoresLocked()
	if err != nil {
		return err
	}
	m.mu.Lock()
	var state checkpoint.State
	for uid, allocs := range m.stale {
		for k := range allocs {
			state.Entries = append(state.Entries, checkpoint.Entry{PodUID: uid, ContainerName: k.container, ResourceName: k.resource})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(state.Entries, func(a, b checkpoint.Entry) int {
		return cmp.Or(cmp.Compare(a.PodUID, b.PodUID), cmp.Compare(a.ContainerName, b.ContainerName), cmp.Compare(a.ResourceName, b.ResourceName))
	})
	return staleStore.Write(state)
}

func (m *Manager) isStaleLocked(uid, container, resource string) bool {
	return m.stale[uid].Has(containerResource{container: container, resource: resource})
}

func (m *Manager) markStaleLocked(uid, container, resource string) {
	if m.stale[uid] == nil {
		m.stale[uid] = sets.New[containerResource]()
	}
	m.stale[uid].Insert(containerResource{container: container, resource: resource})
}

func (m *Manager) unmarkStaleLocked(uid, container, resource string) {
	if m.stale[uid].Delete(containerResource{container: container, resource: resource}).Len() == 0 {
		delete(m.stale, uid)
	}
}

// RestoreAllocations rebuilds the committed allocations from their mirror
// (the DeviceAllocation objects) after RestoreCheckpoint found the
// checkpoint corrupt, writes a fresh checkpoint, and then lets allocation
// resume. Call it with an empty list if there is nothing to rebuild.
//
// The objects keep each container's merged runtime options, not each
// plugin's response, so the response of a container's first resource (by
// name, the first one merged) is synthesized from RuntimeOptions and its
// other resources get empty responses: the merged options come out the
// same. Devices are placed on their NUMA node from the plugin's report when
// the resource is known, else on the resource's only NUMA node, else under
// "no topology". The resources of the allocations are restored as awaiting
// their plugin (RestoreRegisteredResources). Whether the node rebooted
// cannot be told from the objects: the plugins' Allocate is not run again.
//
// Allocations that cannot be restored (no device, empty names, a device
// another pod holds) are skipped and reported in the error; the others are
// restored. If the checkpoint cannot be written, allocation stays refused
// and the call may be repeated.
func (m *Manager) RestoreAllocations(allocs []PodAllocation) error {
	m.mu.Lock()
	entries, registered, errs := m.entriesFromAllocationsLocked(allocs)
	m.restored = true
	restored, ferr := m.restoreEntriesLocked(entries)
	m.mu.Unlock()
	if ferr != nil {
		errs = append(errs, ferr)
	}
	m.RestoreRegisteredResources(registered)

	if err := m.persist(); err != nil {
		errs = append(errs, fmt.Errorf("writing the rebuilt checkpoint: %w", err))
	} else {
		m.mu.Lock()
		m.rebuildPending = false
		m.mu.Unlock()
	}
	m.logger.Info("Rebuilt the device allocations", "pods", len(allocs), "allocations", len(restored), "skipped", len(entries)-len(restored))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rebuilding device allocations: %w", err)
	}
	return nil
}

// entriesFromAllocationsLocked turns the allocations into checkpoint entries
// (see RestoreAllocations) and returns them with the device IDs of each
// resource and the errors of the allocations left out.
func (m *Manager) entriesFromAllocationsLocked(allocs []PodAllocation) ([]poddevices.Entry, map[string][]string, []error) {
	var errs []error
	var entries []poddevices.Entry
	registered := make(map[string]sets.Set[string])
	for _, pa := range allocs {
		for _, ca := range pa.Containers {
			resources := slices.Clone(ca.Resources)
			slices.SortFunc(resources, func(a, b ResourceAllocation) int { return strings.Compare(a.ResourceName, b.ResourceName) })
			first := true
			for _, ra := range resources {
				if pa.PodUID == "" || ca.Name == "" || ra.ResourceName == "" || len(ra.DeviceIDs) == 0 {
					errs = append(errs, fmt.Errorf("restoring devices of %s for pod %q container %q: empty pod UID, container or resource name, or no device", ra.ResourceName, pa.PodUID, ca.Name))
					continue
				}
				resp := &pluginapi.ContainerAllocateResponse{}
				if first {
					resp, first = responseFromOptions(ca.RuntimeOptions), false
				}
				raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
				if err != nil {
					errs = append(errs, fmt.Errorf("restoring devices of %s for pod %q container %q: %w", ra.ResourceName, pa.PodUID, ca.Name, err))
					continue
				}
				entries = append(entries, poddevices.Entry{
					PodUID: pa.PodUID, PodNamespace: pa.Namespace, PodName: pa.Name, ContainerName: ca.Name,
					ResourceName: ra.ResourceName, DeviceIDs: m.numaPlacementLocked(ra), AllocResp: raw,
				})
				if registered[ra.ResourceName] == nil {
					registered[ra.ResourceName] = sets.New[string]()
				}
				registered[ra.ResourceName].Insert(ra.DeviceIDs...)
			}
		}
	}
	ids := make(map[string][]string, len(registered))
	for r, set := range registered {
		ids[r] = sets.List(set)
	}
	return entries, ids, errs
}

// numaPlacementLocked places the devices of ra on NUMA nodes (see
// RestoreAllocations).
func (m *Manager) numaPlacementLocked(ra ResourceAllocation) map[int64][]string {
	out := make(map[int64][]string)
	var devs map[string]*device
	if r := m.resources[ra.ResourceName]; r != nil {
		devs = r.devices
	}
	for _, id := range ra.DeviceIDs {
		switch d := devs[id]; {
		case d != nil && len(d.numaNodes) > 0:
			for _, n := range d.numaNodes {
				out[n] = append(out[n], id)
			}
		case len(ra.NUMANodes) == 1:
			out[ra.NUMANodes[0]] = append(out[ra.NUMANodes[0]], id)
		default:
			out[poddevices.NodeWithoutTopology] = append(out[poddevices.NodeWithoutTopology], id)
		}
	}
	return out
}

// responseFromOptions turns merged runtime options back into one Allocate
// response that merges to the same options.
func responseFromOptions(o *poddevices.RunContainerOptions) *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{}
	if o == nil {
		return resp
	}
	for _, e := range o.Envs {
		if resp.Envs == nil {
			resp.Envs = make(map[string]string, len(o.Envs))
		}
		resp.Envs[e.Name] = e.Value
	}
	for _, mnt := range o.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, ReadOnly: mnt.ReadOnly})
	}
	for _, d := range o.Devices {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, a := range o.Annotations {
		if resp.Annotations == nil {
			resp.Annotations = make(map[string]string, len(o.Annotations))
		}
		resp.Annotations[a.Key] = a.Value
	}
	for _, c := range o.CDIDevices {
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: c})
	}
	return resp
}

// ImportKubeletCheckpoint imports the kubelet's device manager checkpoint
// (kubelet_internal_checkpoint, checksum verified) to migrate a node from
// the kubelet's device manager: its allocations are restored and its
// resources restored as awaiting their plugin, then the checkpoint is
// written. The kubelet does not record pods' namespaces and names, so those
// allocations have empty ones (in PodAllocations and holders) until they
// end. The kubelet's file is never moved or modified. Allocations that
// conflict with the manager's own are skipped and reported in the error.
//
// No production caller yet: it and the kubelet-format reader are kept for
// observe mode (which reads the kubelet's checkpoint) and for moving a node's
// plugins from the kubelet to the agent.
func (m *Manager) ImportKubeletCheckpoint(path string) error {
	state, err := checkpoint.ReadKubeletFile(path)
	if err != nil {
		var cerr *checkpoint.CorruptError
		if errors.As(err, &cerr) {
			m.metrics.checkpointCorrupt.WithLabelValues(string(cerr.Reason)).Inc()
		}
		return fmt.Errorf("importing kubelet checkpoint: %w", err)
	}
	m.mu.Lock()
	m.restored = true
	restored, ferr := m.restoreEntriesLocked(state.Entries)
	m.mu.Unlock()
	m.RestoreRegisteredResources(state.RegisteredDevices)
	werr := m.persist()
	m.logger.Info("Imported the kubelet's device checkpoint", "path", path, "allocations", len(restored), "skipped", len(state.Entries)-len(restored))
	if err := errors.Join(ferr, werr); err != nil {
		return fmt.Errorf("importing kubelet checkpoint %s: %w", path, err)
	}
	return nil
}

// CheckpointInfo returns the provenance of the checkpoint on disk: the boot
// ID it records and when it was written (by this process, or as read by
// RestoreCheckpoint).
func (m *Manager) CheckpointInfo() CheckpointInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ckptInfo
}
