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
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// respBuilder builds ContainerAllocateResponses:
// newResp().Env("K", "V").Mount("/c", "/h", true).CDI("vendor.com/gpu=0").Obj().
type respBuilder struct {
	r *pluginapi.ContainerAllocateResponse
}

func newResp() *respBuilder {
	return &respBuilder{r: &pluginapi.ContainerAllocateResponse{}}
}

func (b *respBuilder) Env(name, value string) *respBuilder {
	if b.r.Envs == nil {
		b.r.Envs = map[string]string{}
	}
	b.r.Envs[name] = value
	return b
}

func (b *respBuilder) Annotation(key, value string) *respBuilder {
	if b.r.Annotations == nil {
		b.r.Annotations = map[string]string{}
	}
	b.r.Annotations[key] = value
	return b
}

func (b *respBuilder) Mount(containerPath, hostPath string, readOnly bool) *respBuilder {
	b.r.Mounts = append(b.r.Mounts, &pluginapi.Mount{ContainerPath: containerPath, HostPath: hostPath, ReadOnly: readOnly})
	return b
}

func (b *respBuilder) Device(containerPath, hostPath, permissions string) *respBuilder {
	b.r.Devices = append(b.r.Devices, &pluginapi.DeviceSpec{ContainerPath: containerPath, HostPath: hostPath, Permissions: permissions})
	return b
}

func (b *respBuilder) CDI(names ...string) *respBuilder {
	for _, n := range names {
		b.r.CdiDevices = append(b.r.CdiDevices, &pluginapi.CDIDevice{Name: n})
	}
	return b
}

func (b *respBuilder) Obj() *pluginapi.ContainerAllocateResponse {
	return b.r
}

// podRef returns a PodRef whose namespace and name derive from uid.
func podRef(uid string) PodRef {
	return PodRef{UID: uid, Namespace: "ns-" + uid, Name: "name-" + uid}
}

// allocate runs a successful transaction: reserve every device of perNUMA, then commit.
func allocate(t testing.TB, s *Store, podUID, container, resource string, perNUMA map[int64][]string,
	resp *pluginapi.ContainerAllocateResponse) {
	t.Helper()
	ids := sets.New[string]()
	for _, l := range perNUMA {
		ids.Insert(l...)
	}
	if err := s.Reserve(podUID, container, resource, sets.List(ids)...); err != nil {
		t.Fatalf("Reserve(%s, %s, %s): %v", podUID, container, resource, err)
	}
	if err := s.Commit(podRef(podUID), container, resource, perNUMA, resp); err != nil {
		t.Fatalf("Commit(%s, %s, %s): %v", podUID, container, resource, err)
	}
}

// view is everything a Store shows to its callers about its state, in comparable form.
type view struct {
	// Used is Devices(), each set sorted.
	Used map[string][]string
	// Committed maps "pod/container/resource" to its device IDs, from Entries().
	Committed map[string][]string
	// Pods is Pods(), sorted.
	Pods []string
}

func viewOf(s *Store) view {
	v := view{Used: map[string][]string{}, Committed: map[string][]string{}}
	if pods := s.Pods(); pods.Len() > 0 {
		v.Pods = sets.List(pods)
	}
	for r, ids := range s.Devices() {
		v.Used[r] = sets.List(ids)
	}
	for _, e := range s.Entries() {
		ids := sets.New[string]()
		for _, l := range e.DeviceIDs {
			ids.Insert(l...)
		}
		v.Committed[holderKey(e.PodUID, e.ContainerName, e.ResourceName)] = sets.List(ids)
	}
	return v
}

func holderKey(pod, container, resource string) string {
	return fmt.Sprintf("%s/%s/%s", pod, container, resource)
}

// checkInvariants verifies the invariants documented in store.go against the Store's internals.
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	// Recompute the owner index from the pods: resource → id → pod → places holding it.
	want := map[string]map[string]map[string]int{}
	for uid, p := range s.pods {
		if len(p.containers) == 0 {
			t.Errorf("I6: pod %s has no containers", uid)
		}
		committed := 0
		for c, resources := range p.containers {
			if len(resources) == 0 {
				t.Errorf("I6: pod %s container %s has no allocations", uid, c)
			}
			for r, a := range resources {
				if a.reserved == nil && a.committed == nil {
					t.Errorf("I6: %s holds nothing", holderKey(uid, c, r))
				}
				if a.reserved != nil && a.reserved.Len() == 0 {
					t.Errorf("I6: %s has an empty reservation", holderKey(uid, c, r))
				}
				var held []sets.Set[string]
				if a.reserved != nil {
					held = append(held, a.reserved)
				}
				if a.committed != nil {
					committed++
					if a.committed.ids.Len() == 0 || a.committed.resp == nil {
						t.Errorf("I5: %s has an invalid commit", holderKey(uid, c, r))
					}
					union := sets.New[string]()
					for _, l := range a.committed.devicesPerNUMA {
						if len(l) == 0 || !slices.IsSorted(l) || sets.New(l...).Len() != len(l) {
							t.Errorf("I5: %s has a device list that is empty, unsorted or has duplicates: %v", holderKey(uid, c, r), l)
						}
						union.Insert(l...)
					}
					if !union.Equal(a.committed.ids) {
						t.Errorf("I5: %s ids %v are not the union of %v", holderKey(uid, c, r), sets.List(a.committed.ids), a.committed.devicesPerNUMA)
					}
					held = append(held, a.committed.ids)
				}
				for _, ids := range held {
					for id := range ids {
						if want[r] == nil {
							want[r] = map[string]map[string]int{}
						}
						if want[r][id] == nil {
							want[r][id] = map[string]int{}
						}
						want[r][id][uid]++
					}
				}
			}
		}
		if committed != p.committed {
			t.Errorf("I6: pod %s counts %d commits, has %d", uid, p.committed, committed)
		}
	}
	got := map[string]map[string]map[string]int{}
	for r, ids := range s.owners {
		if len(ids) == 0 {
			t.Errorf("I2: resource %s has an empty owner index", r)
		}
		got[r] = map[string]map[string]int{}
		for id, o := range ids {
			got[r][id] = map[string]int{o.podUID: o.refs}
		}
	}
	for r, ids := range want {
		for id, pods := range ids {
			if len(pods) > 1 {
				t.Errorf("I1: device %s of %s is held by several pods: %v", id, r, pods)
			}
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("I2: owner index differs from the holders (-want +got):\n%s", d)
	}
}
