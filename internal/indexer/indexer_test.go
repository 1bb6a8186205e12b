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

package indexer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

func TestDeviceKeys(t *testing.T) {
	alloc := func(conds ...metav1.Condition) *kdv1alpha1.DeviceAllocation {
		return &kdv1alpha1.DeviceAllocation{
			Spec: kdv1alpha1.DeviceAllocationSpec{NodeName: "n1"},
			Status: kdv1alpha1.DeviceAllocationStatus{
				Containers: []kdv1alpha1.ContainerAllocation{
					{Name: "init", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{"g1"}}}},
					{Name: "app", Resources: []kdv1alpha1.ResourceAllocation{
						{ResourceName: "example.com/gopher", DeviceIDs: []string{"g1", "g0"}},
						{ResourceName: "example.com/other", DeviceIDs: []string{"g0"}},
					}},
				},
				Conditions: conds,
			},
		}
	}
	all := []string{
		DeviceKey("n1", "example.com/gopher", "g0"),
		DeviceKey("n1", "example.com/gopher", "g1"),
		DeviceKey("n1", "example.com/other", "g0"),
	}
	released := metav1.Condition{Type: kdv1alpha1.DeviceAllocationReleased, Status: metav1.ConditionTrue}
	notReleased := metav1.Condition{Type: kdv1alpha1.DeviceAllocationReleased, Status: metav1.ConditionFalse}

	cases := map[string]struct {
		da       *kdv1alpha1.DeviceAllocation
		wantAll  []string
		wantLive []string
	}{
		"live: devices reused across containers counted once": {da: alloc(), wantAll: all, wantLive: all},
		"Released=False is still live":                        {da: alloc(notReleased), wantAll: all, wantLive: all},
		"released: no live devices":                           {da: alloc(released), wantAll: all},
		"no devices":                                          {da: &kdv1alpha1.DeviceAllocation{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantAll, DeviceKeys(tc.da)); diff != "" {
				t.Errorf("DeviceKeys (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLive, LiveDeviceKeys(tc.da)); diff != "" {
				t.Errorf("LiveDeviceKeys (-want +got):\n%s", diff)
			}
		})
	}
	if DeviceKey("n1", "a/b", "c") == DeviceKey("n1", "a", "b/c") {
		t.Error("device keys of different resources collide")
	}
}
