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
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

// holder is one place that holds devices: a container's allocation of one resource.
type holder struct {
	pod, container, resource string
}

// model is the obvious, slow specification of a Store: reservations and commits per holder.
type model struct {
	reserved  map[holder]sets.Set[string]
	committed map[holder]sets.Set[string]
}

// heldByOtherPod reports whether a pod other than pod reserves or commits id of resource.
func (m *model) heldByOtherPod(pod, resource, id string) bool {
	for _, places := range []map[holder]sets.Set[string]{m.reserved, m.committed} {
		for h, ids := range places {
			if h.pod != pod && h.resource == resource && ids.Has(id) {
				return true
			}
		}
	}
	return false
}

// used is what Devices() must return.
func (m *model) used() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, places := range []map[holder]sets.Set[string]{m.reserved, m.committed} {
		for h, ids := range places {
			if out[h.resource] == nil {
				out[h.resource] = sets.New[string]()
			}
			out[h.resource].Insert(ids.UnsortedList()...)
		}
	}
	return out
}

// TestStoreRandomOperations applies thousands of random Reserve, Commit, Rollback, Release and
// Delete calls on a small, contended pool of devices and checks after each one that the Store
// agrees with the model: same errors, Devices() equal to the union of committed and reserved
// devices, committed views equal to the model's commits, no device held by two pods, and the
// internal invariants of store.go.
func TestStoreRandomOperations(t *testing.T) {
	pods := []string{"p0", "p1", "p2", "p3", "p4"}
	containers := []string{"init", "c0", "c1"}
	resources := []string{res1, res2}
	devices := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"}
	nodes := []int64{NodeWithoutTopology, 0, 1}
	const ops = 3000

	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			pick := func(list []string) string { return list[rng.IntN(len(list))] }
			pickIDs := func(from []string, max int) []string {
				n := 1 + rng.IntN(max)
				var ids []string
				for range n {
					ids = append(ids, from[rng.IntN(len(from))])
				}
				return ids
			}
			// existing returns, most of the time, a holder that has an entry in places, so that
			// commits, rollbacks and releases mostly act on something.
			existing := func(places map[holder]sets.Set[string], fallback holder) holder {
				if len(places) == 0 || rng.IntN(5) == 0 {
					return fallback
				}
				keys := slices.SortedFunc(maps.Keys(places), func(x, y holder) int {
					return cmp.Compare(x.pod+"/"+x.container+"/"+x.resource, y.pod+"/"+y.container+"/"+y.resource)
				})
				return keys[rng.IntN(len(keys))]
			}
			s := New()
			m := &model{reserved: map[holder]sets.Set[string]{}, committed: map[holder]sets.Set[string]{}}
			counts := map[string]int{}

			for i := range ops {
				h := holder{pick(pods), pick(containers), pick(resources)}
				var desc string
				var err, wantErr error
				switch op := rng.IntN(10); {
				case op < 4:
					ids := pickIDs(devices, 3)
					desc = fmt.Sprintf("Reserve(%v, %v)", h, ids)
					for _, id := range ids {
						if m.heldByOtherPod(h.pod, h.resource, id) {
							wantErr = ErrDeviceInUse
						}
					}
					err = s.Reserve(h.pod, h.container, h.resource, ids...)
					if wantErr == nil {
						if m.reserved[h] == nil {
							m.reserved[h] = sets.New[string]()
						}
						m.reserved[h].Insert(ids...)
					}
				case op < 7:
					h = existing(m.reserved, h)
					// Mostly a subset of the reservation, sometimes devices it does not hold.
					var ids []string
					if r := m.reserved[h]; r.Len() > 0 && rng.IntN(5) > 0 {
						ids = pickIDs(sets.List(r), r.Len())
					} else {
						ids = pickIDs(devices, 2)
					}
					perNUMA := map[int64][]string{}
					for _, id := range ids {
						n := nodes[rng.IntN(len(nodes))]
						perNUMA[n] = append(perNUMA[n], id)
						if n != NodeWithoutTopology && rng.IntN(4) == 0 {
							perNUMA[1-n] = append(perNUMA[1-n], id) // a device on both nodes
						}
					}
					desc = fmt.Sprintf("Commit(%v, %v)", h, perNUMA)
					if !m.reserved[h].HasAll(ids...) {
						wantErr = ErrNotReserved
					}
					err = s.Commit(podRef(h.pod), h.container, h.resource, perNUMA, newResp().Env("H", fmt.Sprint(h)).Obj())
					if wantErr == nil {
						m.committed[h] = sets.New(ids...)
						delete(m.reserved, h)
					}
				case op < 8:
					h = existing(m.reserved, h)
					desc = fmt.Sprintf("Rollback(%v)", h)
					s.Rollback(h.pod, h.container, h.resource)
					delete(m.reserved, h)
				case op < 9:
					h = existing(m.committed, h)
					desc = fmt.Sprintf("Release(%v)", h)
					_, want := m.committed[h]
					if got := s.Release(h.pod, h.container, h.resource); got != want {
						t.Fatalf("op %d %s = %t, want %t", i, desc, got, want)
					}
					delete(m.committed, h)
				default:
					uids := []string{pick(pods), pick(pods)}
					desc = fmt.Sprintf("Delete(%v)", uids)
					want := 0
					for k := range m.committed {
						if k.pod == uids[0] || k.pod == uids[1] {
							want++
							delete(m.committed, k)
						}
					}
					if got := s.Delete(uids...); got != want {
						t.Fatalf("op %d %s removed %d, want %d", i, desc, got, want)
					}
				}
				if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
					t.Fatalf("op %d %s: error %v, want %v", i, desc, err, wantErr)
				}
				if wantErr == nil {
					counts["ok"]++
				} else {
					counts[wantErr.Error()]++
				}
				checkAgainstModel(t, s, m, fmt.Sprintf("op %d %s", i, desc))
			}
			// The run must have exercised the interesting paths, or it proves little.
			if counts[ErrDeviceInUse.Error()] < ops/50 || counts[ErrNotReserved.Error()] < ops/50 || counts["ok"] < ops/2 {
				t.Errorf("too few operations of some outcome: %v", counts)
			}
		})
	}
}

func checkAgainstModel(t *testing.T, s *Store, m *model, step string) {
	t.Helper()
	if diff := gocmp.Diff(m.used(), s.Devices()); diff != "" {
		t.Fatalf("%s: Devices() is not committed ∪ reserved (-want +got):\n%s", step, diff)
	}
	committed := map[holder][]string{}
	for h, ids := range m.committed {
		committed[h] = sets.List(ids)
	}
	got := map[holder][]string{}
	devicePods := map[string]map[string]sets.Set[string]{} // resource → id → pods
	for _, e := range s.Entries() {
		h := holder{e.PodUID, e.ContainerName, e.ResourceName}
		got[h] = sets.List(s.ContainerDevices(e.PodUID, e.ContainerName, e.ResourceName))
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				if devicePods[h.resource] == nil {
					devicePods[h.resource] = map[string]sets.Set[string]{}
				}
				if devicePods[h.resource][id] == nil {
					devicePods[h.resource][id] = sets.New[string]()
				}
				devicePods[h.resource][id].Insert(h.pod)
			}
		}
	}
	if diff := gocmp.Diff(committed, got); diff != "" {
		t.Fatalf("%s: committed allocations (-want +got):\n%s", step, diff)
	}
	for r, ids := range devicePods {
		for id, pods := range ids {
			if pods.Len() > 1 {
				t.Fatalf("%s: device %s of %s committed to pods %v", step, id, r, sets.List(pods))
			}
		}
	}
	wantPods := sets.New[string]()
	for h := range m.committed {
		wantPods.Insert(h.pod)
	}
	if diff := gocmp.Diff(wantPods, s.Pods()); diff != "" {
		t.Fatalf("%s: Pods() (-want +got):\n%s", step, diff)
	}
	// Every other committed pod active, plus one that holds nothing: PodsNotIn is the rest.
	active, wantGone := sets.New("no-such-pod"), sets.New[string]()
	for i, uid := range sets.List(wantPods) {
		if i%2 == 0 {
			active.Insert(uid)
		} else {
			wantGone.Insert(uid)
		}
	}
	if diff := gocmp.Diff(wantGone, s.PodsNotIn(active)); diff != "" {
		t.Fatalf("%s: PodsNotIn (-want +got):\n%s", step, diff)
	}
	checkInvariants(t, s)
	if t.Failed() {
		t.FailNow()
	}
}
