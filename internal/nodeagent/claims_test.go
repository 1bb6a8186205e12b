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
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// withDRA serves the given resources through DRA.
func withDRA(resources ...string) func(*testManager, *Config) {
	dra := sets.New(resources...)
	return withConfig(func(c *Config) { c.ServedByDRA = dra.Has })
}

var claimA = ClaimRef{UID: "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa", Namespace: "default", Name: "a"}

func claimDevices(resource string, ids ...string) []ClaimRequest {
	return []ClaimRequest{{ResourceName: resource, DeviceIDs: ids}}
}

func TestPrepareClaim(t *testing.T) {
	tm := newAllocManager(t, withDRA(res1))
	p := startPlugin(t, tm, "r1.sock", res1, true, false, healthy("dev1", "dev2", "dev3")...)

	got, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, "dev3", "dev1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"dev1", "dev3"}}, p.allocateCalls()); diff != "" {
		t.Errorf("Allocate calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"dev1", "dev3"}}, p.preStartCalls()); diff != "" {
		t.Errorf("PreStartContainer calls (-want +got):\n%s", diff)
	}
	if len(got.Resources) != 1 || !cmp.Equal(got.Resources[0].DeviceIDs, []string{"dev1", "dev3"}) ||
		got.Resources[0].Response.GetEnvs()["DOMAIN1_COM_RESOURCE1"] != "dev1,dev3" {
		t.Fatalf("PrepareClaim = %+v; want dev1, dev3 with the plugin's response", got)
	}
	// Idempotent: the same call again answers from the record, no RPC.
	again, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, "dev1", "dev3"))
	if err != nil || !cmp.Equal(again, got, cmpProto) || len(p.allocateCalls()) != 1 {
		t.Errorf("second PrepareClaim = %+v, %v (Allocate calls %d); want the same, no RPC", again, err, len(p.allocateCalls()))
	}
	// Other devices for the same claim: refused.
	if _, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, "dev2")); !errors.Is(err, ErrClaimConflict) {
		t.Errorf("PrepareClaim with other devices = %v; want ErrClaimConflict", err)
	}
	// The snapshot names the claim as the holder.
	snap, _ := tm.Snapshot(res1)
	if !snap.ServedByDRA || snap.Allocated != 2 || snap.Devices[0].Holder == nil || snap.Devices[0].Holder.Claim == nil ||
		snap.Devices[0].Holder.Claim.Name != "a" || snap.Devices[0].Holder.PodUID != "" {
		t.Errorf("snapshot = %+v; want dev1 and dev3 held by claim default/a", snap)
	}
	// Not a pod: PodAllocations and PodsHolding do not show it.
	if pa := tm.PodAllocations(); len(pa) != 0 {
		t.Errorf("PodAllocations = %+v; want none", pa)
	}
	if h := tm.PodsHolding("default", "a"); len(h) != 0 {
		t.Errorf("PodsHolding(default/a) = %v; want none", h)
	}

	freed, err := tm.UnprepareClaim(tm.ctx, claimA.UID)
	if err != nil || !freed {
		t.Fatalf("UnprepareClaim = %v, %v", freed, err)
	}
	if tm.inUse(res1).Len() != 0 {
		t.Errorf("devices in use after UnprepareClaim: %v", sets.List(tm.inUse(res1)))
	}
	if freed, err := tm.UnprepareClaim(tm.ctx, claimA.UID); err != nil || freed {
		t.Errorf("second UnprepareClaim = %v, %v; want nothing to do", freed, err)
	}
}

var cmpProto = cmp.Comparer(func(a, b *pluginapi.ContainerAllocateResponse) bool {
	return a.String() == b.String()
})

func TestPrepareClaimRefusals(t *testing.T) {
	tm := newAllocManager(t, withDRA(res1))
	p := startPlugin(t, tm, "r1.sock", res1, false, false,
		dptest.Device("ok", pluginapi.Healthy), dptest.Device("sick", pluginapi.Unhealthy), dptest.Device("cordoned", pluginapi.Healthy), dptest.Device("held", pluginapi.Healthy))
	startPlugin(t, tm, "r2.sock", res2, false, false, healthy("x")...)
	tm.SetCordons(res1, []string{"cordoned"})
	other := ClaimRef{UID: "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb", Namespace: "default", Name: "b"}
	if _, err := tm.PrepareClaim(tm.ctx, other, claimDevices(res1, "held")); err != nil {
		t.Fatal(err)
	}
	calls := len(p.allocateCalls())

	for _, tc := range []struct {
		name string
		reqs []ClaimRequest
		want string
	}{
		{"unknown", claimDevices(res1, "ok", "nope"), `device "nope" is unknown`},
		{"unhealthy", claimDevices(res1, "ok", "sick"), `device "sick" is unhealthy`},
		{"cordoned", claimDevices(res1, "ok", "cordoned"), `device "cordoned" is cordoned`},
		{"held by another claim", claimDevices(res1, "ok", "held"), `device "held" is held by ResourceClaim default/b`},
		{"not a DRA resource", claimDevices(res2, "x"), "is not served through DRA"},
		{"no devices", claimDevices(res1), "without a resource name or devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tm.PrepareClaim(tm.ctx, claimA, tc.reqs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PrepareClaim = %v; want an error containing %q", err, tc.want)
			}
			if _, ok := tm.Claim(claimA.UID); ok {
				t.Error("the refused claim holds devices")
			}
			if got := tm.inUse(res1); !got.Equal(sets.New("held")) {
				t.Errorf("devices in use = %v; want only the other claim's", sets.List(got))
			}
		})
	}
	if len(p.allocateCalls()) != calls {
		t.Errorf("Allocate called for a refused claim: %v", p.allocateCalls()[calls:])
	}
}

// TestPrepareClaimRollsBack: a failing Allocate, or PreStartContainer, of
// the second resource leaves nothing of the first.
func TestPrepareClaimRollsBack(t *testing.T) {
	tm := newAllocManager(t, withDRA(res1, res2))
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("a1")...)
	p2 := startPlugin(t, tm, "r2.sock", res2, true, false, healthy("b1")...)
	reqs := append(claimDevices(res1, "a1"), claimDevices(res2, "b1")...)

	p2.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, status.Error(codes.Internal, "gpu on fire")
	})
	_, err := tm.PrepareClaim(tm.ctx, claimA, reqs)
	if err == nil || !strings.Contains(err.Error(), "gpu on fire") || IsRetryable(err) {
		t.Fatalf("PrepareClaim = %v; want the plugin's message, not retryable", err)
	}
	if tm.inUse(res1).Len()+tm.inUse(res2).Len() != 0 {
		t.Errorf("devices in use after a failed prepare: %v %v", sets.List(tm.inUse(res1)), sets.List(tm.inUse(res2)))
	}
	if cp := tm.readCheckpoint(t); len(cp.State.Entries) != 0 {
		t.Errorf("checkpoint entries after a failed prepare: %+v", cp.State.Entries)
	}

	p2.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{echoResponse(res2, r.ContainerRequests[0].DevicesIds)}}, nil
	})
	p2.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "not warmed up")
	})
	if _, err := tm.PrepareClaim(tm.ctx, claimA, reqs); err == nil || !strings.Contains(err.Error(), "not warmed up") {
		t.Fatalf("PrepareClaim with a failing PreStartContainer = %v", err)
	}
	if tm.inUse(res1).Len()+tm.inUse(res2).Len() != 0 {
		t.Errorf("devices in use after a failed PreStartContainer: %v %v", sets.List(tm.inUse(res1)), sets.List(tm.inUse(res2)))
	}
}

// TestClaimsAndPodsNeverShareADevice: a device a pod holds through the
// device plugin path is never prepared for a claim, a claim's device is
// never allocated to a pod, and a resource switched to DRA keeps the
// devices pods hold until they are freed.
func TestClaimsAndPodsNeverShareADevice(t *testing.T) {
	dra := sets.New[string]()
	tm := newAllocManager(t, withConfig(func(c *Config) { c.ServedByDRA = func(r string) bool { return dra.Has(r) } }))
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)

	// Device plugin path first: the pod gets dev1.
	pod := makePod("old").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	podDev := sets.List(tm.containerDevices(pod, "c", res1))[0]

	// The resource is switched to DRA (in the agent a restart with
	// --dra-resources; here the matcher changes under the running core).
	dra.Insert(res1)
	_, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, podDev))
	if err == nil || !strings.Contains(err.Error(), "device plugin path") {
		t.Fatalf("PrepareClaim of the pod's device = %v; want a refusal naming the pod", err)
	}
	free := "dev1"
	if podDev == "dev1" {
		free = "dev2"
	}
	if _, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, free)); err != nil {
		t.Fatal(err)
	}
	// The pod keeps its device (already allocated: no RPC, no refusal).
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Errorf("AllocatePod of the pod holding its device = %v", err)
	}
	// A new pod cannot take the resource through the device plugin path.
	newPod := makePod("new").container("c", req{res1, 1}).obj()
	if err := tm.AllocatePod(tm.ctx, newPod); err == nil || !strings.Contains(err.Error(), "served through DRA") {
		t.Errorf("AllocatePod of a new pod = %v; want a refusal", err)
	}
	// Garbage collection of pods never frees the claim.
	if err := tm.UpdateAllocatedDevices(tm.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tm.inUse(res1); !got.Equal(sets.New(free)) {
		t.Errorf("in use after the pods' GC = %v; want the claim's %s only", sets.List(got), free)
	}
	// The pod's device, freed, can go to a claim now.
	other := ClaimRef{UID: "33333333-cccc-4ccc-8ccc-cccccccccccc", Namespace: "default", Name: "c"}
	if _, err := tm.PrepareClaim(tm.ctx, other, claimDevices(res1, podDev)); err != nil {
		t.Errorf("PrepareClaim of the freed device = %v", err)
	}
}

// TestClaimsSurviveRestart: a prepared claim is in the checkpoint under its
// claim key, survives an agent restart and the pods' garbage collection,
// and is unprepared by the restarted agent; after a reboot the plugin's
// Allocate runs again when the kubelet prepares the claim again.
func TestClaimsSurviveRestart(t *testing.T) {
	tm := newAllocManager(t, withDRA(res1))
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	if _, err := tm.PrepareClaim(tm.ctx, claimA, claimDevices(res1, "dev2")); err != nil {
		t.Fatal(err)
	}
	cp := tm.readCheckpoint(t)
	if len(cp.State.Entries) != 1 || cp.State.Entries[0].PodUID != "claim:"+claimA.UID || cp.State.Entries[0].ContainerName != ClaimContainer ||
		cp.State.Entries[0].PodName != "a" {
		t.Fatalf("checkpoint entries = %+v; want the claim under its claim key", cp.State.Entries)
	}
	tm.Stop()

	restarted := restartedManager(t, tm, testBootID)
	restarted.cfg.ServedByDRA = sets.New(res1).Has
	restarted.start(t)
	if err := restarted.UpdateAllocatedDevices(restarted.ctx, []*v1.Pod{}); err != nil {
		t.Fatal(err)
	}
	got, ok := restarted.Claim(claimA.UID)
	if !ok || !cmp.Equal(got.Resources[0].DeviceIDs, []string{"dev2"}) || got.Claim.Name != "a" {
		t.Fatalf("Claim after restart = %+v, %v; want dev2", got, ok)
	}
	p := startPlugin(t, restarted, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	if _, err := restarted.PrepareClaim(restarted.ctx, claimA, claimDevices(res1, "dev2")); err != nil || len(p.allocateCalls()) != 0 {
		t.Errorf("PrepareClaim after restart = %v, Allocate calls %v; want the record, no RPC", err, p.allocateCalls())
	}
	restarted.Stop()

	const bootID2 = "22222222-2222-2222-2222-222222222222"
	rebooted := restartedManager(t, restarted, bootID2)
	rebooted.cfg.ServedByDRA = sets.New(res1).Has
	rebooted.start(t)
	q := startPlugin(t, rebooted, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	if _, err := rebooted.PrepareClaim(rebooted.ctx, claimA, claimDevices(res1, "dev2")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"dev2"}}, q.allocateCalls()); diff != "" {
		t.Errorf("Allocate after the reboot (-want +got):\n%s", diff)
	}
	if freed, err := rebooted.UnprepareClaim(rebooted.ctx, claimA.UID); err != nil || !freed {
		t.Fatalf("UnprepareClaim = %v, %v", freed, err)
	}
	if cp := rebooted.readCheckpoint(t); len(cp.State.Entries) != 0 {
		t.Errorf("checkpoint entries after UnprepareClaim: %+v", cp.State.Entries)
	}
}
