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
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// restartedManager is a new, unstarted manager over the checkpoint and
// plugin directory of old (which must be stopped before it starts), on a
// node whose boot ID is bootID: an agent restart (same boot ID) or a
// node reboot.
func restartedManager(t *testing.T, old *testManager, bootID string) *testManager {
	t.Helper()
	path, dir := old.cfg.CheckpointPath, old.dir
	sameDirs := func(tm *testManager, c *Config) {
		c.CheckpointPath, c.PluginDir = path, dir
		tm.dir = dir
	}
	return newTestManager(t, false, withBootID(bootID), sameDirs)
}

// readCheckpoint reads the manager's checkpoint file through its own store
// (another store would remove the temporary file of a write in progress).
func (tm *testManager) readCheckpoint(t *testing.T) *checkpoint.Checkpoint {
	t.Helper()
	cp, err := tm.tryReadCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// tryReadCheckpoint is readCheckpoint returning its error, which matches
// checkpoint.ErrNotFound before the first write. It holds the writers' lock:
// a write it sees has finished, counted in the metrics.
func (tm *testManager) tryReadCheckpoint() (*checkpoint.Checkpoint, error) {
	tm.ckptMu.Lock()
	defer tm.ckptMu.Unlock()
	store, _, err := tm.checkpointStoresLocked()
	if err != nil {
		return nil, err
	}
	cp, err := store.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	return cp, nil
}

func (tm *testManager) start(t *testing.T) {
	t.Helper()
	if err := tm.Start(tm.ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// runtimeOptionsOf returns every container's merged options, by pod UID
// and container.
func (tm *testManager) runtimeOptionsOf(pods ...*v1.Pod) map[string]*poddevices.RunContainerOptions {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := map[string]*poddevices.RunContainerOptions{}
	for _, p := range pods {
		for _, c := range podContainers(p) {
			opts, _ := tm.pods.RunContainerOptions(string(p.UID), c.Name)
			out[string(p.UID)+"/"+c.Name] = opts
		}
	}
	return out
}

// The kubelet's TestCheckpoint: five allocations over three resources, one
// of them without topology, survive a write and a read in a new manager,
// with their devices, options, used devices and resources.
func TestCheckpoint(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, numaDevice("dev1", 0), numaDevice("dev2", 0), numaDevice("dev3", 0), numaDevice("dev4", 0), numaDevice("dev5", 0))
	startPlugin(t, tm, "r2.sock", res2, false, false, numaDevice("dev1", 0), numaDevice("dev2", 0))
	startPlugin(t, tm, "r3.sock", res3, false, false, healthy("dev5")...)
	pod1 := makePod("pod1").container("con1").container("con2").obj()
	pod2 := makePod("pod2").container("con1").obj()
	pod3 := makePod("pod3").namespace("other").container("con3").obj()
	tm.hold(t, pod1, "con1", res1, "dev1", "dev2")
	tm.hold(t, pod1, "con1", res2, "dev1", "dev2")
	tm.hold(t, pod1, "con2", res1, "dev3")
	tm.hold(t, pod2, "con1", res1, "dev4")
	tm.hold(t, pod3, "con3", res3, "dev5")
	if err := tm.persist(); err != nil {
		t.Fatalf("writing the checkpoint: %v", err)
	}
	wantAllocs := tm.PodAllocations()
	wantOpts := tm.runtimeOptionsOf(pod1, pod2, pod3)
	wantInUse := map[string]sets.Set[string]{res1: tm.inUse(res1), res2: tm.inUse(res2), res3: tm.inUse(res3)}

	restarted := restartedManager(t, tm, testBootID)
	res, err := restarted.RestoreCheckpoint(restarted.ctx)
	if err != nil {
		t.Fatalf("RestoreCheckpoint: %v", err)
	}
	if diff := cmp.Diff(RestoreResult{Allocations: 3, BootID: testBootID, CurrentBootID: testBootID}, res); diff != "" {
		t.Errorf("RestoreResult (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantAllocs, restarted.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantOpts, restarted.runtimeOptionsOf(pod1, pod2, pod3)); diff != "" {
		t.Errorf("run-container options (-want +got):\n%s", diff)
	}
	gotInUse := map[string]sets.Set[string]{res1: restarted.inUse(res1), res2: restarted.inUse(res2), res3: restarted.inUse(res3)}
	if diff := cmp.Diff(wantInUse, gotInUse); diff != "" {
		t.Errorf("devices in use (-want +got):\n%s", diff)
	}
	var names []string
	for _, s := range restarted.Snapshots() {
		names = append(names, s.ResourceName)
	}
	if diff := cmp.Diff([]string{res1, res2, res3}, names); diff != "" {
		t.Errorf("restored resources (-want +got):\n%s", diff)
	}
	// The kubelet's TestUpdateCapacityAllocatable tail: 0/0 until the plugin
	// is back.
	if diff := cmp.Diff(map[string]string{res1: "0/0", res2: "0/0", res3: "0/0"}, restarted.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	if info := restarted.CheckpointInfo(); info.BootID != testBootID || info.LastWrite.IsZero() {
		t.Errorf("CheckpointInfo = %+v", info)
	}
}

// An agent restart: the allocations come back, the resource is
// unallocatable (retryable) until its plugin registers again, and then
// AllocatePod of the restored pod is a no-op with no RPC while a new pod
// gets another device.
func TestRestartRestoresAllocations(t *testing.T) {
	tm := newAllocManager(t)
	p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	pod := makePod("p").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	want := tm.PodAllocations()
	tm.Stop()

	restarted := restartedManager(t, tm, testBootID)
	res, err := restarted.RestoreCheckpoint(restarted.ctx)
	if err != nil || res.Rebooted || res.Allocations != 1 {
		t.Fatalf("RestoreCheckpoint = %+v, %v; want 1 allocation, no reboot", res, err)
	}
	if diff := cmp.Diff(want, restarted.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	held := want[0].Containers[0].Resources[0].DeviceIDs[0]
	snap, _ := restarted.Snapshot(res1)
	for _, d := range snap.Devices {
		if d.ID == held && (d.Holder == nil || d.Holder.PodName != "p" || d.Reason != ReasonAwaitingPlugin) {
			t.Errorf("restored device %s: %+v", d.ID, d)
		}
	}
	if _, err := restarted.RestoreCheckpoint(restarted.ctx); err == nil {
		t.Error("a second RestoreCheckpoint succeeded")
	}

	newPod := makePod("new").container("c", req{res1, 1}).obj()
	err = restarted.AllocatePod(restarted.ctx, newPod)
	wantErr := &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationPluginUnavailable, Retryable: true}
	if diff := cmp.Diff(wantErr, viewError(err)); diff != "" {
		t.Errorf("AllocatePod of a new pod before the plugin is back (-want +got):\n%s", diff)
	}
	if err := restarted.AllocatePod(restarted.ctx, pod); err != nil {
		t.Errorf("AllocatePod of the restored pod before the plugin is back: %v", err)
	}

	// The manager removes the stale plugin sockets when it starts; the
	// plugin serves and registers again.
	restarted.start(t)
	p.Stop()
	p = startPlugin(t, restarted, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	if err := restarted.AllocatePod(restarted.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := p.allocateCalls(); len(got) != 0 {
		t.Errorf("Allocate calls for the restored pod: %v", got)
	}
	if err := restarted.AllocatePod(restarted.ctx, newPod); err != nil {
		t.Fatal(err)
	}
	if got := restarted.containerDevices(newPod, "c", res1); got.Has(held) || got.Len() != 1 {
		t.Errorf("the new pod got %v; %s is held by the restored pod", sets.List(got), held)
	}
}

// A node reboot: the restored allocations keep their devices, and
// AllocatePod runs the plugin's Allocate again with the same IDs once the
// plugin is back, replacing the response; even across another agent
// restart after the checkpoint got the new boot ID.
func TestRebootReallocates(t *testing.T) {
	tm := newAllocManager(t)
	p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2", "dev3")...)
	pod := makePod("p").init("init", req{res1, 1}).container("c", req{res1, 2}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := tm.PodAllocations()
	held := tm.containerDevices(pod, "c", res1).Union(tm.containerDevices(pod, "init", res1))
	tm.Stop()

	// Reboot, and the agent restarts once more before the plugin is back
	// and the pod re-allocated; the first restarted agent has written the
	// checkpoint with the new boot ID meanwhile.
	const bootID2 = "22222222-2222-2222-2222-222222222222"
	first := restartedManager(t, tm, bootID2)
	res, err := first.RestoreCheckpoint(first.ctx)
	if err != nil || !res.Rebooted || res.BootID != testBootID || res.CurrentBootID != bootID2 {
		t.Fatalf("RestoreCheckpoint = %+v, %v; want a reboot from %s to %s", res, err, testBootID, bootID2)
	}
	if diff := cmp.Diff(before, first.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations after the reboot (-want +got):\n%s", diff)
	}
	err = first.AllocatePod(first.ctx, pod)
	if !IsRetryable(err) || AllocationReasonOf(err) != AllocationPluginUnavailable {
		t.Errorf("AllocatePod before the plugin is back = %v; want a retryable PluginUnavailable refusal", err)
	}
	first.start(t)
	q := startPlugin(t, first, "other.sock", res2, false, false, healthy("x")...) // writes the checkpoint
	_ = q
	first.Stop()

	second := restartedManager(t, first, bootID2)
	res, err = second.RestoreCheckpoint(second.ctx)
	if err != nil || res.Rebooted {
		t.Fatalf("RestoreCheckpoint = %+v, %v; want no reboot", res, err)
	}
	second.start(t)
	p.Stop()
	p = startPlugin(t, second, "r1.sock", res1, false, false, healthy("dev1", "dev2", "dev3")...)
	p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		ids := r.GetContainerRequests()[0].GetDevicesIds()
		p.mu.Lock()
		p.allocated = append(p.allocated, ids)
		p.mu.Unlock()
		resp := echoResponse(res1, ids)
		resp.Envs["BOOT"] = "2"
		return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{resp}}, nil
	})

	// Another pod cannot take the devices the rebooted pod holds.
	other := makePod("other").container("c", req{res1, 1}).obj()
	if err := second.AllocatePod(second.ctx, other); err != nil {
		t.Fatal(err)
	}
	if got := second.containerDevices(other, "c", res1); got.HasAny(sets.List(held)...) {
		t.Errorf("another pod got %v, held by the rebooted pod (%v)", sets.List(got), sets.List(held))
	}
	calls := len(p.allocateCalls())
	if err := second.AllocatePod(second.ctx, pod); err != nil {
		t.Fatal(err)
	}
	wantCalls := [][]string{
		sets.List(tm.containerDevices(pod, "init", res1)),
		sets.List(tm.containerDevices(pod, "c", res1)),
	}
	if diff := cmp.Diff(wantCalls, p.allocateCalls()[calls:]); diff != "" {
		t.Errorf("Allocate calls for the rebooted pod (-want +got):\n%s", diff)
	}
	after, _ := second.PodAllocation(string(pod.UID))
	for _, c := range after.Containers {
		if got := envValue(c.RuntimeOptions, "BOOT"); got != "2" {
			t.Errorf("container %s: BOOT = %q, want the new response's 2", c.Name, got)
		}
	}
	calls = len(p.allocateCalls())
	if err := second.AllocatePod(second.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := p.allocateCalls()[calls:]; len(got) != 0 {
		t.Errorf("Allocate calls once re-allocated: %v", got)
	}

	// And a third agent knows the re-allocation happened.
	second.Stop()
	third := restartedManager(t, second, bootID2)
	if _, err := third.RestoreCheckpoint(third.ctx); err != nil {
		t.Fatal(err)
	}
	third.mu.Lock()
	stale := len(third.stale)
	third.mu.Unlock()
	if stale != 0 {
		t.Errorf("%d pods still await re-allocation", stale)
	}
}

func envValue(o *poddevices.RunContainerOptions, name string) string {
	if o == nil {
		return ""
	}
	for _, e := range o.Envs {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Every corrupt checkpoint is quarantined and reported, never read as
// empty state; allocation waits for RestoreAllocations, which rebuilds the
// state and writes a fresh checkpoint.
func TestCorruptCheckpoint(t *testing.T) {
	cases := []struct {
		name   string
		mangle func([]byte) []byte
		reason checkpoint.CorruptReason
	}{
		// The first "dev1" is in the snapshot (the registered devices).
		{"bad checksum", func(b []byte) []byte { return bytes.Replace(b, []byte(`dev1`), []byte(`dev9`), 1) }, checkpoint.ReasonChecksumMismatch},
		// A snapshot is renamed into place whole: one cut short is damage,
		// not a torn write (TestTornCheckpointTail).
		{"truncated snapshot", func(b []byte) []byte { return b[:16] }, checkpoint.ReasonTruncated},
		{"empty", func([]byte) []byte { return nil }, checkpoint.ReasonEmpty},
		{"unknown version", func(b []byte) []byte { return append([]byte("KDVCKPT\x63"), b[8:]...) }, checkpoint.ReasonUnknownVersion},
		{"version 1, bad checksum", func(b []byte) []byte {
			return bytes.Replace(v1File(t, checkpoint.State{RegisteredDevices: map[string][]string{res1: {"dev1", "dev2"}}}), []byte(`"dev1"`), []byte(`"dev9"`), 1)
		}, checkpoint.ReasonChecksumMismatch},
		{"not JSON", func([]byte) []byte { return []byte("\x00\x01garbage") }, checkpoint.ReasonNotJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tm := newAllocManager(t)
			p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
			pod := makePod("p").container("c", req{res1, 1}).obj()
			if err := tm.AllocatePod(tm.ctx, pod); err != nil {
				t.Fatal(err)
			}
			allocs := tm.PodAllocations()
			tm.Stop()
			path := tm.cfg.CheckpointPath
			blob, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			mangled := tc.mangle(blob)
			if err := os.WriteFile(path, mangled, 0o600); err != nil {
				t.Fatal(err)
			}

			restarted := restartedManager(t, tm, testBootID)
			_, err = restarted.RestoreCheckpoint(restarted.ctx)
			var cerr *checkpoint.CorruptError
			if !errors.As(err, &cerr) || cerr.Reason != tc.reason {
				t.Fatalf("RestoreCheckpoint = %v; want a *checkpoint.CorruptError with reason %s", err, tc.reason)
			}
			if got, err := os.ReadFile(cerr.QuarantinedPath); err != nil || !bytes.Equal(got, mangled) {
				t.Errorf("quarantined file %q: %v (same bytes: %t)", cerr.QuarantinedPath, err, bytes.Equal(got, mangled))
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the corrupt checkpoint is still at %s: %v", path, err)
			}
			if got := testutil.ToFloat64(restarted.metrics.checkpointCorrupt.WithLabelValues(string(tc.reason))); got != 1 {
				t.Errorf("kubedevice_checkpoint_corrupt_total{reason=%s} = %v, want 1", tc.reason, got)
			}
			if got := restarted.PodAllocations(); len(got) != 0 {
				t.Errorf("state after a corrupt checkpoint: %+v", got)
			}

			// Allocation waits for the rebuild, even with the plugin back.
			restarted.start(t)
			p.Stop()
			startPlugin(t, restarted, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
			newPod := makePod("new").container("c", req{res1, 1}).obj()
			err = restarted.AllocatePod(restarted.ctx, newPod)
			if !IsRetryable(err) || !errors.Is(err, errRebuildPending) {
				t.Errorf("AllocatePod before the rebuild = %v; want a retryable refusal", err)
			}

			if err := restarted.RestoreAllocations(allocs); err != nil {
				t.Fatalf("RestoreAllocations: %v", err)
			}
			if diff := cmp.Diff(allocs, restarted.PodAllocations()); diff != "" {
				t.Errorf("rebuilt allocations (-want +got):\n%s", diff)
			}
			if err := restarted.AllocatePod(restarted.ctx, newPod); err != nil {
				t.Fatalf("AllocatePod after the rebuild: %v", err)
			}
			if a, b := restarted.containerDevices(pod, "c", res1), restarted.containerDevices(newPod, "c", res1); a.HasAny(b.UnsortedList()...) {
				t.Errorf("the new pod got %v, held by the rebuilt pod", sets.List(b))
			}

			// The fresh checkpoint holds both.
			restarted.Stop()
			third := restartedManager(t, restarted, testBootID)
			if _, err := third.RestoreCheckpoint(third.ctx); err != nil {
				t.Fatalf("reading the rebuilt checkpoint: %v", err)
			}
			if got := len(third.PodAllocations()); got != 2 {
				t.Errorf("the rebuilt checkpoint holds %d pods, want 2", got)
			}
		})
	}
}

// RestoreAllocations rebuilds allocations whose merged options come out the
// same, places devices on NUMA nodes, restores their resources as awaiting
// their plugin, skips what cannot be restored, and writes the checkpoint.
func TestRestoreAllocations(t *testing.T) {
	tm := newAllocManager(t)
	opts := &poddevices.RunContainerOptions{
		Envs:        []poddevices.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		Mounts:      []poddevices.Mount{{ContainerPath: "/lib", HostPath: "/host/lib", ReadOnly: true}},
		Devices:     []poddevices.DeviceSpec{{ContainerPath: "/dev/x", HostPath: "/dev/x", Permissions: "rw"}},
		Annotations: []poddevices.Annotation{{Key: "k", Value: "v"}},
		CDIDevices:  []string{"vendor.com/dev=b", "vendor.com/dev=a"},
	}
	allocs := []PodAllocation{
		{
			PodUID: "uid-a", Namespace: "ns", Name: "a",
			Containers: []ContainerAllocation{{
				Name: "c",
				Resources: []ResourceAllocation{
					{ResourceName: res2, DeviceIDs: []string{"x1"}},
					{ResourceName: res1, DeviceIDs: []string{"d0", "d1"}, NUMANodes: []int64{0}},
				},
				RuntimeOptions: opts,
			}},
		},
		{
			PodUID: "uid-b", Namespace: "ns", Name: "b",
			Containers: []ContainerAllocation{{
				Name:      "c",
				Resources: []ResourceAllocation{{ResourceName: res1, DeviceIDs: []string{"d2", "d3"}, NUMANodes: []int64{0, 1}}},
			}},
		},
		{ // holds d1 too: skipped
			PodUID: "uid-c", Namespace: "ns", Name: "c",
			Containers: []ContainerAllocation{{Name: "c", Resources: []ResourceAllocation{{ResourceName: res1, DeviceIDs: []string{"d1"}}}}},
		},
	}
	err := tm.RestoreAllocations(allocs)
	if err == nil || !errors.Is(err, poddevices.ErrDeviceInUse) {
		t.Errorf("RestoreAllocations = %v; want the conflicting pod reported", err)
	}
	want := []PodAllocation{
		{
			PodUID: "uid-a", Namespace: "ns", Name: "a",
			Containers: []ContainerAllocation{{
				Name: "c",
				Resources: []ResourceAllocation{
					{ResourceName: res1, DeviceIDs: []string{"d0", "d1"}, NUMANodes: []int64{0}},
					{ResourceName: res2, DeviceIDs: []string{"x1"}},
				},
				RuntimeOptions: opts,
			}},
		},
		{
			PodUID: "uid-b", Namespace: "ns", Name: "b",
			Containers: []ContainerAllocation{{
				Name:           "c",
				Resources:      []ResourceAllocation{{ResourceName: res1, DeviceIDs: []string{"d2", "d3"}}},
				RuntimeOptions: &poddevices.RunContainerOptions{},
			}},
		},
	}
	if diff := cmp.Diff(want, tm.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	snap, ok := tm.Snapshot(res1)
	if !ok {
		t.Fatalf("%s not restored", res1)
	}
	var awaiting []string
	for _, d := range snap.Devices {
		if d.Reason == ReasonAwaitingPlugin {
			awaiting = append(awaiting, d.ID)
		}
	}
	if diff := cmp.Diff([]string{"d0", "d1", "d2", "d3"}, awaiting); diff != "" {
		t.Errorf("devices awaiting their plugin (-want +got):\n%s", diff)
	}
	if snap.Allocated != 4 {
		t.Errorf("Allocated = %d, want 4", snap.Allocated)
	}
	if got := len(tm.readCheckpoint(t).State.Entries); got != 3 {
		t.Errorf("checkpoint after RestoreAllocations: %d entries, want 3", got)
	}
}

// The kubelet's own checkpoint, as the kubelet wrote it, is imported: its
// allocations (without namespaces and names) and resources.
func TestImportKubeletCheckpoint(t *testing.T) {
	tm := newAllocManager(t)
	path := filepath.Join("checkpoint", "testdata", checkpoint.KubeletFileName)
	if err := tm.ImportKubeletCheckpoint(path); err != nil {
		t.Fatalf("ImportKubeletCheckpoint: %v", err)
	}
	type alloc struct{ Pod, Container, Resource, Devices string }
	var got []alloc
	for _, pa := range tm.PodAllocations() {
		if pa.Namespace != "" || pa.Name != "" {
			t.Errorf("pod %s has namespace/name %s/%s", pa.PodUID, pa.Namespace, pa.Name)
		}
		for _, c := range pa.Containers {
			for _, r := range c.Resources {
				got = append(got, alloc{pa.PodUID, c.Name, r.ResourceName, strings.Join(r.DeviceIDs, ",")})
			}
		}
	}
	want := []alloc{
		{"6b1b0d6e-0f5c-4b8e-9a3e-2f4c1d7e8a01", "app", "example.com/gopher", "gopher-2"},
		{"6b1b0d6e-0f5c-4b8e-9a3e-2f4c1d7e8a01", "init", "example.com/gopher", "gopher-0,gopher-1"},
		{"c0ffee00-1111-2222-3333-444455556666", "nic-user", "vendor.com/nic", "nic-0,nic-10,nic-2"},
		{"c0ffee00-1111-2222-3333-444455556666", `odd "names" <&> ü`, "vendor.com/odd", "<tag>&amp;,id with spaces,ünïcödé"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imported allocations (-want +got):\n%s", diff)
	}
	var names []string
	for _, s := range tm.Snapshots() {
		names = append(names, s.ResourceName)
	}
	if diff := cmp.Diff([]string{"example.com/empty", "example.com/gopher", "vendor.com/nic", "vendor.com/odd"}, names); diff != "" {
		t.Errorf("imported resources (-want +got):\n%s", diff)
	}
	// Our own checkpoint now holds them.
	tm.Stop()
	restarted := restartedManager(t, tm, testBootID)
	if _, err := restarted.RestoreCheckpoint(restarted.ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tm.PodAllocations(), restarted.PodAllocations()); diff != "" {
		t.Errorf("allocations after a restart (-want +got):\n%s", diff)
	}

	t.Run("corrupt", func(t *testing.T) {
		tm := newAllocManager(t)
		bad := filepath.Join(t.TempDir(), checkpoint.KubeletFileName)
		if err := os.WriteFile(bad, []byte(`{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":1}`), 0o600); err != nil {
			t.Fatal(err)
		}
		err := tm.ImportKubeletCheckpoint(bad)
		if !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("ImportKubeletCheckpoint = %v, want a corrupt checkpoint error", err)
		}
		if got := testutil.ToFloat64(tm.metrics.checkpointCorrupt.WithLabelValues(string(checkpoint.ReasonChecksumMismatch))); got != 1 {
			t.Errorf("corrupt counter = %v, want 1", got)
		}
	})
}

// The checkpoint is written when the registered device set changes, not on
// health flaps; when pods are freed; and when a resource is removed.
func TestCheckpointWrites(t *testing.T) {
	tm := newAllocManager(t)
	writes := func() float64 { return testutil.ToFloat64(tm.metrics.checkpointWrites.WithLabelValues(resultSuccess)) }
	registered := func(t *testing.T) map[string][]string {
		t.Helper()
		return tm.readCheckpoint(t).State.RegisteredDevices
	}
	// The plugin's stream goroutine writes the devices after the manager
	// shows them (startPlugin's wait): the first write creates the file.
	waitRegistered := func(t *testing.T, want map[string][]string) {
		t.Helper()
		dptest.Eventually(t, waitTimeout, func() error {
			cp, err := tm.tryReadCheckpoint()
			if errors.Is(err, checkpoint.ErrNotFound) {
				return err
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, cp.State.RegisteredDevices); diff != "" {
				return fmt.Errorf("registered devices in the checkpoint (-want +got):\n%s", diff)
			}
			return nil
		})
	}
	p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("a", "b")...)
	waitRegistered(t, map[string][]string{res1: {"a", "b"}})
	n := writes()

	// A health flap, then a new device: only the latter is written (the
	// stream's messages are processed in order).
	p.Update([]*pluginapi.Device{dptest.Device("a", pluginapi.Unhealthy), dptest.Device("b", pluginapi.Healthy)})
	p.Update(healthy("a", "b", "c"))
	waitRegistered(t, map[string][]string{res1: {"a", "b", "c"}})
	if got := writes(); got != n+1 {
		t.Errorf("checkpoint writes went from %v to %v, want one write for the new device and none for the health flap", n, got)
	}

	pod := makePod("p").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	n = writes()
	if err := tm.UpdateAllocatedDevices(tm.ctx, []*v1.Pod{pod}); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != n {
		t.Errorf("GC with nothing to free wrote the checkpoint")
	}
	if err := tm.UpdateAllocatedDevices(tm.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != n+1 {
		t.Errorf("freeing a pod: %v writes, want %v", got, n+1)
	}

	p.Stop()
	tm.waitCounts(t, map[string]string{res1: "3/0"})
	n = writes()
	tm.clock.Step(DefaultEndpointGracePeriod)
	dptest.Eventually(t, waitTimeout, func() error {
		if got := registered(t); len(got) != 0 {
			return errors.New("the removed resource is still in the checkpoint")
		}
		return nil
	})
	if writes() <= n {
		t.Error("removing the resource did not write the checkpoint")
	}
}

// A corrupt list of allocations awaiting re-allocation is quarantined and
// every restored allocation is re-allocated: Allocate again is safe,
// skipping it after a reboot is not.
func TestCorruptReallocationMarks(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	pod := makePod("p").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	tm.Stop()
	marks := tm.cfg.CheckpointPath + reallocateSuffix
	if err := os.WriteFile(marks, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}

	restarted := restartedManager(t, tm, testBootID)
	if res, err := restarted.RestoreCheckpoint(restarted.ctx); err != nil || res.Rebooted {
		t.Fatalf("RestoreCheckpoint = %+v, %v", res, err)
	}
	if _, err := os.Stat(marks); err != nil {
		t.Errorf("no fresh list of allocations awaiting re-allocation: %v", err)
	}
	restarted.start(t)
	p := startPlugin(t, restarted, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	if err := restarted.AllocatePod(restarted.ctx, pod); err != nil {
		t.Fatal(err)
	}
	want := [][]string{sets.List(tm.containerDevices(pod, "c", res1))}
	if diff := cmp.Diff(want, p.allocateCalls()); diff != "" {
		t.Errorf("Allocate calls (-want +got):\n%s", diff)
	}
}

// v1File is state as an agent of format version 1 wrote it.
func v1File(t *testing.T, state checkpoint.State) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), checkpoint.DefaultFileName)
	store, err := checkpoint.New(path, checkpoint.Options{BootIDPath: writeBootID(t, testBootID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(state); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return blob
}
