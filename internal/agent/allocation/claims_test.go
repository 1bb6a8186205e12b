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

package allocation

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// TestClaimDevices maps the claims the DRA flow prepared to the pod's containers: by the
// containers' resources.claims (a whole claim, or one request, subrequests included), and by the
// scheduler's request mappings of extended resources served through DRA (KEP-5004).
func TestClaimDevices(t *testing.T) {
	prepared := map[string]nodeagent.ClaimAllocation{
		"ns/shared": {Resources: []nodeagent.ClaimResourceAllocation{
			{Request: "a", ResourceName: "example.com/gopher", DeviceIDs: []string{"g0"}},
			{Request: "b/fast", ResourceName: "example.com/gopher", DeviceIDs: []string{"g1"}},
		}},
		"ns/pod-ext-abc": {Resources: []nodeagent.ClaimResourceAllocation{
			{Request: "container-0-request-0", ResourceName: "example.com/gopher", DeviceIDs: []string{"g2"}},
		}},
	}
	lookup := func(ns, name string) (nodeagent.ClaimAllocation, bool) {
		c, ok := prepared[ns+"/"+name]
		return c, ok
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "s", ResourceClaimName: ptr.To("shared")}, {Name: "t"}, {Name: "gone", ResourceClaimName: ptr.To("gone")}},
			InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "s", Request: "b"}}}}},
			Containers: []corev1.Container{
				{Name: "all", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "s"}, {Name: "gone"}}}},
				{Name: "ext"},
				{Name: "none", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "t"}}}},
			},
		},
		Status: corev1.PodStatus{
			// The template's claim is not generated yet: nothing for "none".
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "t"}},
			ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{
				ResourceClaimName: "pod-ext-abc",
				RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "ext", ResourceName: "example.com/gopher", RequestName: "container-0-request-0"}},
			},
		},
	}
	got := claimDevices(lookup, pod)
	want := &nodeagent.PodAllocation{PodUID: "u", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{
		{Name: "all", Resources: []nodeagent.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{"g0", "g1"}}}},
		{Name: "ext", Resources: []nodeagent.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{"g2"}}}},
		{Name: "init", Resources: []nodeagent.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{"g1"}}}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claimDevices (-want +got):\n%s", diff)
	}
	if claimDevices(lookup, &corev1.Pod{}) != nil {
		t.Error("a pod without claims holds claim devices")
	}

	// Merged with the device plugin path's allocation, by container.
	dp := &nodeagent.PodAllocation{PodUID: "u", Containers: []nodeagent.ContainerAllocation{
		{Name: "all", Resources: []nodeagent.ResourceAllocation{{ResourceName: "acme.io/fpga", DeviceIDs: []string{"f0"}}}},
	}}
	merged := withClaims(dp, got)
	if len(merged.Containers) != 3 || len(merged.Containers[0].Resources) != 2 || merged.Containers[0].Resources[0].ResourceName != "acme.io/fpga" {
		t.Errorf("withClaims = %+v", merged)
	}
	if len(dp.Containers[0].Resources) != 1 {
		t.Error("withClaims changed the device plugin path's allocation")
	}
}
