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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func writeBootID(t *testing.T, id string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeV1 writes state at path as an agent of format version 1 did, in
// boot bootID.
func writeV1(t *testing.T, path, bootID string, state checkpoint.State) {
	t.Helper()
	store, err := checkpoint.New(path, checkpoint.Options{BootIDPath: writeBootID(t, bootID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(state); err != nil {
		t.Fatal(err)
	}
}

func (tm *testManager) state() checkpoint.State {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.checkpointStateLocked()
}

func (tm *testManager) isStale(uid, container, resource string) bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.isStaleLocked(uid, container, resource)
}

// The journal always reads back as the state in memory: every change the
// checkpoint records is appended (allocations, frees, failed allocations,
// registered devices changing, a resource removed).
func TestCheckpointJournalMatchesState(t *testing.T) {
	tm := newAllocManager(t, withConfig(func(c *Config) { c.EndpointGracePeriod = time.Minute }))
	var check func(string)
	// Registration changes are written by the plugin's stream goroutine,
	// after the change is visible: wait for that write.
	checkAsync := func(step string) {
		t.Helper()
		if err := tm.persist(); err != nil {
			t.Fatalf("%s: persist: %v", step, err)
		}
		check(step)
	}
	check = func(step string) {
		t.Helper()
		// What each call wrote, before anything else writes.
		cp := tm.readCheckpoint(t)
		if diff := cmp.Diff(tm.state(), cp.State, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: checkpoint differs from the state (-memory +disk):\n%s", step, diff)
		}
		if cp.TornTail != nil || cp.Format != checkpoint.JournalVersion {
			t.Errorf("%s: read %+v", step, cp)
		}
	}
	p1 := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2", "dev3", "dev4")...)
	startPlugin(t, tm, "r2.sock", res2, false, false, healthy("a", "b")...)
	checkAsync("registered")
	pods := []*podBuilder{
		makePod("p1").container("c", req{res1, 1}),
		makePod("p2").container("c1", req{res1, 2}).container("c2", req{res2, 1}),
		makePod("p3").container("c", req{res2, 1}),
	}
	for _, b := range pods {
		if err := tm.AllocatePod(tm.ctx, b.obj()); err != nil {
			t.Fatal(err)
		}
		check("allocated " + b.pod.Name)
	}
	// A pod that cannot be allocated changes nothing on disk.
	if err := tm.AllocatePod(tm.ctx, makePod("toomany").container("c", req{res1, 4}).obj()); err == nil {
		t.Fatal("allocating more devices than free succeeded")
	}
	check("refused")
	if err := tm.UpdateAllocatedDevices(tm.ctx, []*v1.Pod{pods[1].obj()}); err != nil {
		t.Fatal(err)
	}
	check("freed p1 and p3") // written, not synced yet
	synced := tm.checkpointWriteCount()
	if err := tm.persist(); err != nil {
		t.Fatal(err)
	}
	tm.ckptMu.Lock()
	syncedAt, writtenAt := tm.ckptSynced, tm.ckptWritten
	tm.ckptMu.Unlock()
	if syncedAt != writtenAt || tm.checkpointWriteCount() != synced {
		t.Errorf("persist after a free: synced at %d, written at %d, %v writes; want the free flushed without a new write", syncedAt, writtenAt, tm.checkpointWriteCount()-synced)
	}
	p1.Update(healthy("dev1", "dev2", "dev5"))
	tm.waitDevices(t, res1, healthy("dev1", "dev2", "dev5")...)
	checkAsync("devices changed")
	p1.Stop()
	dptest.Eventually(t, waitTimeout, func() error {
		tm.clock.Step(2 * time.Minute) // until the disconnect armed the grace timer
		if _, ok := tm.Snapshot(res1); ok {
			return fmt.Errorf("resource %s not removed after its grace period", res1)
		}
		return nil
	})
	checkAsync("resource removed")
}

// An agent upgraded over a checkpoint of format version 1 restores all of
// it and converts it at once, keeping the reboot marks.
func TestUpgradeFromVersion1(t *testing.T) {
	for name, boot := range map[string]string{"agent restart": testBootID, "written before a reboot": "earlier-boot"} {
		t.Run(name, func(t *testing.T) {
			tm := newAllocManager(t)
			startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2", "dev3")...)
			for _, b := range []*podBuilder{makePod("p1").container("c", req{res1, 1}), makePod("p2").container("c", req{res1, 2})} {
				if err := tm.AllocatePod(tm.ctx, b.obj()); err != nil {
					t.Fatal(err)
				}
			}
			want, state := tm.PodAllocations(), tm.state()
			tm.Stop()
			path := tm.cfg.CheckpointPath
			writeV1(t, path, boot, state)

			restarted := restartedManager(t, tm, testBootID)
			res, err := restarted.RestoreCheckpoint(restarted.ctx)
			rebooted := boot != testBootID
			if err != nil || res.Allocations != 2 || res.Rebooted != rebooted {
				t.Fatalf("RestoreCheckpoint = %+v, %v; want 2 allocations, rebooted %t", res, err, rebooted)
			}
			if diff := cmp.Diff(want, restarted.PodAllocations()); diff != "" {
				t.Errorf("PodAllocations (-want +got):\n%s", diff)
			}
			blob, err := os.ReadFile(path)
			if err != nil || !bytes.HasPrefix(blob, []byte("KDVCKPT\x02")) {
				t.Fatalf("checkpoint after the first start is not of format 2: %q, %v", blob[:min(len(blob), 16)], err)
			}
			cp := restarted.readCheckpoint(t)
			if diff := cmp.Diff(state, cp.State, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("converted checkpoint (-v1 +v2):\n%s", diff)
			}
			if cp.BootID != testBootID {
				t.Errorf("converted checkpoint boot ID = %q, want the current %q", cp.BootID, testBootID)
			}
			restarted.Stop()

			// Another restart in the same boot still knows which
			// allocations await Allocate after the reboot.
			again := restartedManager(t, restarted, testBootID)
			res, err = again.RestoreCheckpoint(again.ctx)
			if err != nil || res.Allocations != 2 || res.Rebooted {
				t.Fatalf("second RestoreCheckpoint = %+v, %v", res, err)
			}
			if diff := cmp.Diff(want, again.PodAllocations()); diff != "" {
				t.Errorf("PodAllocations after the second restart (-want +got):\n%s", diff)
			}
			for _, uid := range []string{"uid-p1", "uid-p2"} {
				if got := again.isStale(uid, "c", res1); got != rebooted {
					t.Errorf("pod %s awaits Allocate again: %t, want %t", uid, got, rebooted)
				}
			}
		})
	}
}

// Issue 13: the checkpoint moves from the plugin directory, which every
// plugin mounts read-write, to the state directory. An agent upgraded over
// an install that kept it there (format 1) reads it, writes it to the state
// directory, and only then removes it from the plugin directory.
func TestStateDirMigration(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	pod := makePod("p").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	want, state := tm.PodAllocations(), tm.state()
	tm.Stop()
	legacy := filepath.Join(tm.dir, checkpoint.DefaultFileName)
	if tm.cfg.CheckpointPath != legacy {
		t.Fatalf("without a state directory the checkpoint is at %s, want %s", tm.cfg.CheckpointPath, legacy)
	}
	writeV1(t, legacy, testBootID, state)
	writeV1(t, legacy+reallocateSuffix, testBootID, checkpoint.State{Entries: []checkpoint.Entry{{PodUID: "uid-p", ContainerName: "c", ResourceName: res1}}})

	stateDir := filepath.Join(dptest.ShortTempDir(t), "state")
	inStateDir := func(rm *testManager, c *Config) {
		c.PluginDir, c.StateDir = tm.dir, stateDir
		rm.dir = tm.dir
	}
	restarted := newTestManager(t, false, withBootID(testBootID), inStateDir)
	res, err := restarted.RestoreCheckpoint(restarted.ctx)
	if err != nil || res.MigratedFrom != legacy || res.Allocations != 1 {
		t.Fatalf("RestoreCheckpoint = %+v, %v; want 1 allocation migrated from %s", res, err, legacy)
	}
	if diff := cmp.Diff(want, restarted.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	if !restarted.isStale("uid-p", "c", res1) {
		t.Error("the reallocation mark of the plugin directory was lost")
	}
	for _, p := range []string{legacy, legacy + reallocateSuffix} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after the migration: %v", p, err)
		}
	}
	for _, p := range []string{checkpoint.DefaultFileName, checkpoint.DefaultFileName + reallocateSuffix} {
		if _, err := os.Stat(filepath.Join(stateDir, p)); err != nil {
			t.Errorf("%s not in the state directory: %v", p, err)
		}
	}
	restarted.Stop()

	again := newTestManager(t, false, withBootID(testBootID), inStateDir)
	res, err = again.RestoreCheckpoint(again.ctx)
	if err != nil || res.MigratedFrom != "" || res.Allocations != 1 {
		t.Fatalf("RestoreCheckpoint after the migration = %+v, %v", res, err)
	}
	if diff := cmp.Diff(want, again.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations after the migration (-want +got):\n%s", diff)
	}
	if !again.isStale("uid-p", "c", res1) {
		t.Error("the reallocation mark was lost after the migration")
	}
}

// The agent killed while appending a free or an allocation: the write that
// never finished is reported (counted, logged, a copy saved) and left out;
// everything before it is restored and the file is rewritten without it.
func TestTornCheckpointTail(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	first := makePod("p1").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, first); err != nil {
		t.Fatal(err)
	}
	want := tm.PodAllocations()
	path := tm.cfg.CheckpointPath
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.AllocatePod(tm.ctx, makePod("p2").container("c", req{res1, 1}).obj()); err != nil {
		t.Fatal(err)
	}
	tm.Stop()
	after, err := os.ReadFile(path)
	if err != nil || len(after) <= len(before)+8 || !bytes.HasPrefix(after, before) {
		t.Fatalf("the second allocation did not append a frame: %d then %d bytes, %v", len(before), len(after), err)
	}
	torn := after[:len(before)+(len(after)-len(before))/2]
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}

	restarted := restartedManager(t, tm, testBootID)
	res, err := restarted.RestoreCheckpoint(restarted.ctx)
	if err != nil || res.TornTail == nil || res.Allocations != 1 {
		t.Fatalf("RestoreCheckpoint = %+v, %v; want 1 allocation and a torn tail", res, err)
	}
	if diff := cmp.Diff(want, restarted.PodAllocations()); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(restarted.metrics.checkpointCorrupt.WithLabelValues(reasonTornTail)); got != 1 {
		t.Errorf("kubedevice_checkpoint_corrupt_total{reason=TornTail} = %v, want 1", got)
	}
	if saved, err := os.ReadFile(res.TornTail.SavedPath); err != nil || !bytes.Equal(saved, torn) {
		t.Errorf("saved copy %q: %v", res.TornTail.SavedPath, err)
	}
	if cp := restarted.readCheckpoint(t); cp.TornTail != nil || len(cp.State.Entries) != 1 {
		t.Errorf("checkpoint after the restore: %+v, want rewritten without the torn tail", cp)
	}
}
