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

package poddevices

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// decodedEntry is an Entry with its response decoded, for comparison.
type decodedEntry struct {
	Entry
	Resp *pluginapi.ContainerAllocateResponse
}

func decode(t *testing.T, entries []Entry) []decodedEntry {
	t.Helper()
	var out []decodedEntry
	for _, e := range entries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			t.Fatalf("decoding the response of %s: %v", holderKey(e.PodUID, e.ContainerName, e.ResourceName), err)
		}
		out = append(out, decodedEntry{Entry: e, Resp: resp})
	}
	return out
}

func TestEntries(t *testing.T) {
	s := New()
	gpu := newResp().Env("GPU", "0").Device("/dev/gpu0", "/dev/gpu0", "rw").Obj()
	nic := newResp().Annotation("nic", "1").CDI("vendor.com/nic=1").Obj()
	allocate(t, s, "pod-b", "app", res1, map[int64][]string{1: {"d3", "d2"}, 0: {"d2"}}, gpu)
	allocate(t, s, "pod-a", "sidecar", res2, map[int64][]string{NodeWithoutTopology: {"n1"}}, nic)
	allocate(t, s, "pod-a", "app", res2, map[int64][]string{NodeWithoutTopology: {"n2"}}, nic)
	allocate(t, s, "pod-a", "app", res1, map[int64][]string{0: {"d1"}}, gpu)
	// In flight: never in the entries.
	if err := s.Reserve("pod-a", "app", res1, "d9"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve("pod-c", "app", res1, "d8"); err != nil {
		t.Fatal(err)
	}

	entry := func(uid, container, resource string, ids map[int64][]string, resp *pluginapi.ContainerAllocateResponse) decodedEntry {
		return decodedEntry{
			Entry: Entry{PodUID: uid, PodNamespace: "ns-" + uid, PodName: "name-" + uid, ContainerName: container, ResourceName: resource, DeviceIDs: ids},
			Resp:  resp,
		}
	}
	want := []decodedEntry{
		entry("pod-a", "app", res1, map[int64][]string{0: {"d1"}}, gpu),
		entry("pod-a", "app", res2, map[int64][]string{NodeWithoutTopology: {"n2"}}, nic),
		entry("pod-a", "sidecar", res2, map[int64][]string{NodeWithoutTopology: {"n1"}}, nic),
		entry("pod-b", "app", res1, map[int64][]string{0: {"d2"}, 1: {"d2", "d3"}}, gpu),
	}
	got := s.Entries()
	if diff := cmp.Diff(want, decode(t, got), protocmp.Transform(), cmpopts.IgnoreFields(Entry{}, "AllocResp")); diff != "" {
		t.Errorf("Entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(got, s.Entries()); diff != "" {
		t.Errorf("Entries changed between two calls on the same state (-first +second):\n%s", diff)
	}
}

// TestEntriesAreByteStable checks that the response encoding does not depend on map order, so an
// unchanged state always writes the same checkpoint.
func TestEntriesAreByteStable(t *testing.T) {
	b := newResp()
	for i := range 32 {
		b.Env(fmt.Sprintf("ENV_%02d", i), "v").Annotation(fmt.Sprintf("a%02d", i), "v")
	}
	resp := b.Obj()
	first := New()
	allocate(t, first, "pod", "c", res1, map[int64][]string{0: {"d1"}}, resp)
	want := first.Entries()
	for i := range 20 {
		// Fresh stores, so each encodes the response anew.
		s := New()
		allocate(t, s, "pod", "c", res1, map[int64][]string{0: {"d1"}}, resp)
		if diff := cmp.Diff(want, s.Entries()); diff != "" {
			t.Fatalf("run %d: entries differ (-want +got):\n%s", i, diff)
		}
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "init", res1, map[int64][]string{0: {"d1"}, 1: {"d1"}}, newResp().Env("A", "1").Mount("/c", "/h", true).Obj())
	allocate(t, s, "pod1", "app", res1, map[int64][]string{0: {"d1"}}, newResp().Env("A", "1").Obj())
	allocate(t, s, "pod1", "app", res2, map[int64][]string{NodeWithoutTopology: {"n1"}}, newResp().Env("A", "2").CDI("v.com/n=1").Obj())
	allocate(t, s, "pod2", "app", res1, map[int64][]string{1: {"d2"}}, newResp().Obj())

	restored := New()
	skipped, err := restored.FromEntries(s.Entries())
	if skipped != 0 || err != nil {
		t.Fatalf("FromEntries skipped %d: %v", skipped, err)
	}
	if diff := cmp.Diff(s.Entries(), restored.Entries()); diff != "" {
		t.Errorf("Entries after the round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(viewOf(s), viewOf(restored)); diff != "" {
		t.Errorf("view after the round trip (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ pod, container string }{{"pod1", "init"}, {"pod1", "app"}, {"pod2", "app"}} {
		wantOpts, wantConflicts := s.RunContainerOptions(c.pod, c.container)
		gotOpts, gotConflicts := restored.RunContainerOptions(c.pod, c.container)
		if diff := cmp.Diff(wantOpts, gotOpts); diff != "" {
			t.Errorf("RunContainerOptions(%s, %s) after the round trip (-want +got):\n%s", c.pod, c.container, diff)
		}
		if diff := cmp.Diff(wantConflicts, gotConflicts); diff != "" {
			t.Errorf("conflicts of %s/%s after the round trip (-want +got):\n%s", c.pod, c.container, diff)
		}
		if diff := cmp.Diff(s.GetContainerDevices(c.pod, c.container), restored.GetContainerDevices(c.pod, c.container)); diff != "" {
			t.Errorf("GetContainerDevices(%s, %s) after the round trip (-want +got):\n%s", c.pod, c.container, diff)
		}
	}
	checkInvariants(t, restored)
}

func TestFromEntriesSkipsAndReports(t *testing.T) {
	good := func(uid, container, resource string, ids ...string) Entry {
		raw, err := proto.Marshal(newResp().Env("A", uid).Obj())
		if err != nil {
			t.Fatal(err)
		}
		return Entry{PodUID: uid, PodNamespace: "ns", PodName: uid, ContainerName: container, ResourceName: resource,
			DeviceIDs: map[int64][]string{0: ids}, AllocResp: raw}
	}
	corrupt := good("pod-bad", "c", res1, "d5")
	corrupt.AllocResp = []byte{0xff, 0xff, 0xff}
	noDevices := good("pod-empty", "c", res1)
	emptyResp := good("pod-nil-resp", "c", res2, "n1")
	emptyResp.AllocResp = nil

	testCases := map[string]struct {
		entries      []Entry
		reserved     []string // devices of res1 that pod-r reserved before the restore
		wantSkipped  int
		wantErrs     []error
		wantErrText  []string
		wantRestored []string
	}{
		"all good, sharing inside a pod is kept": {
			entries:      []Entry{good("pod1", "init", res1, "d1"), good("pod1", "app", res1, "d1")},
			wantRestored: []string{"pod1/app/" + res1, "pod1/init/" + res1},
		},
		"corrupt response is skipped and reported": {
			entries:      []Entry{good("pod1", "c", res1, "d1"), corrupt, good("pod2", "c", res1, "d2")},
			wantSkipped:  1,
			wantErrs:     []error{ErrInvalidAllocation},
			wantErrText:  []string{`pod "pod-bad" container "c"`, "decoding allocate response"},
			wantRestored: []string{"pod1/c/" + res1, "pod2/c/" + res1},
		},
		"empty response bytes are an empty response": {
			entries:      []Entry{emptyResp},
			wantRestored: []string{"pod-nil-resp/c/" + res2},
		},
		"entry without devices is skipped": {
			entries:      []Entry{noDevices, good("pod1", "c", res1, "d1")},
			wantSkipped:  1,
			wantErrs:     []error{ErrInvalidAllocation},
			wantErrText:  []string{`pod "pod-empty"`, "no device IDs"},
			wantRestored: []string{"pod1/c/" + res1},
		},
		"device of another pod: the later entry is skipped": {
			entries:      []Entry{good("pod1", "c", res1, "d1", "d2"), good("pod2", "c", res1, "d3", "d2")},
			wantSkipped:  1,
			wantErrs:     []error{ErrDeviceInUse},
			wantErrText:  []string{`pod "pod2"`, `device "d2" held by pod "pod1"`},
			wantRestored: []string{"pod1/c/" + res1},
		},
		"device reserved by another pod": {
			entries:      []Entry{good("pod1", "c", res1, "d1")},
			reserved:     []string{"d1"},
			wantSkipped:  1,
			wantErrs:     []error{ErrDeviceInUse},
			wantErrText:  []string{`held by pod "pod-r"`},
			wantRestored: nil,
		},
		"several skipped entries are all reported": {
			entries:      []Entry{corrupt, noDevices, good("pod1", "c", res1, "d1")},
			wantSkipped:  2,
			wantErrs:     []error{ErrInvalidAllocation},
			wantErrText:  []string{`pod "pod-bad"`, `pod "pod-empty"`},
			wantRestored: []string{"pod1/c/" + res1},
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := New()
			if err := s.Reserve("pod-r", "c", res1, tc.reserved...); err != nil {
				t.Fatal(err)
			}
			skipped, err := s.FromEntries(tc.entries)
			if skipped != tc.wantSkipped {
				t.Errorf("skipped %d, want %d (error: %v)", skipped, tc.wantSkipped, err)
			}
			if (err == nil) != (tc.wantSkipped == 0) {
				t.Errorf("error %v with %d skipped", err, skipped)
			}
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			for _, want := range tc.wantErrText {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v does not mention %q", err, want)
				}
			}
			var got []string
			for _, e := range s.Entries() {
				got = append(got, holderKey(e.PodUID, e.ContainerName, e.ResourceName))
			}
			if diff := cmp.Diff(tc.wantRestored, got); diff != "" {
				t.Errorf("restored entries (-want +got):\n%s", diff)
			}
			// The reservation made before the restore is untouched.
			if diff := cmp.Diff(sets.New(tc.reserved...), s.Devices()[res1].Intersection(sets.New(tc.reserved...))); diff != "" {
				t.Errorf("reserved devices (-want +got):\n%s", diff)
			}
			checkInvariants(t, s)
		})
	}
}

func TestFromEntriesRecordsThePod(t *testing.T) {
	raw, err := proto.Marshal(newResp().Obj())
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if _, err := s.FromEntries([]Entry{{
		PodUID: "uid1", PodNamespace: "team-a", PodName: "trainer", ContainerName: "c", ResourceName: res1,
		DeviceIDs: map[int64][]string{0: {"d1"}}, AllocResp: raw,
	}}); err != nil {
		t.Fatal(err)
	}
	got := s.Entries()
	if len(got) != 1 || got[0].PodNamespace != "team-a" || got[0].PodName != "trainer" {
		t.Errorf("Entries = %+v, want pod team-a/trainer", got)
	}
}

// PodEntries is Entries restricted to one pod.
func TestPodEntries(t *testing.T) {
	s := New()
	for _, pod := range []string{"uid-a", "uid-b"} {
		for _, c := range []string{"c2", "c1"} {
			id := pod + "-" + c
			if err := s.Reserve(pod, c, "example.com/gopher", id); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(PodRef{UID: pod, Namespace: "ns", Name: pod}, c, "example.com/gopher",
				map[int64][]string{NodeWithoutTopology: {id}}, &pluginapi.ContainerAllocateResponse{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want []Entry
	for _, e := range s.Entries() {
		if e.PodUID == "uid-b" {
			want = append(want, e)
		}
	}
	if len(want) != 2 {
		t.Fatalf("Entries has %d entries of uid-b, want 2", len(want))
	}
	if diff := cmp.Diff(want, s.PodEntries("uid-b")); diff != "" {
		t.Errorf("PodEntries(uid-b) (-want +got):\n%s", diff)
	}
	if got := s.PodEntries("uid-unknown"); got != nil {
		t.Errorf("PodEntries of an unknown pod = %v, want nil", got)
	}
}
