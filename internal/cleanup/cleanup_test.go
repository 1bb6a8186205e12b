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

package cleanup

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

func managedStatus(manager, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields),
	}
}

func TestPublishedResources(t *testing.T) {
	const ours = `{"f:status":{"f:allocatable":{"f:example.com/gopher":{}},"f:capacity":{".":{},"f:example.com/gopher":{}}}}`
	list := func(names ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for _, n := range names {
			l[corev1.ResourceName(n)] = resource.MustParse("1")
		}
		return l
	}
	node := func(capacity, allocatable corev1.ResourceList, managed ...metav1.ManagedFieldsEntry) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: managed},
			Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable},
		}
	}
	cases := map[string]struct {
		node    *corev1.Node
		devices []corev1.ResourceName
		want    []corev1.ResourceName
	}{
		"owned by the controller through status": {
			node: node(list("cpu", "example.com/gopher", "example.org/other"), list("cpu", "example.com/gopher", "example.org/other"),
				managedStatus(contract.ControllerFieldOwner, "status", ours),
				managedStatus("admin", "status", `{"f:status":{"f:capacity":{"f:example.org/other":{}}}}`)),
			want: []corev1.ResourceName{"example.com/gopher"},
		},
		"owned by the controller without the status subresource is not ours": {
			node: node(list("example.com/gopher"), list("example.com/gopher"), managedStatus(contract.ControllerFieldOwner, "", ours)),
		},
		"a NodeDevice's resource owned by someone else": {
			node: node(list("example.com/gopher", "vendor.example/gpu"), list("vendor.example/gpu"),
				managedStatus("admin", "status", `{"f:status":{"f:capacity":{"f:vendor.example/gpu":{}}}}`)),
			devices: []corev1.ResourceName{"vendor.example/gpu", "example.net/absent"},
			want:    []corev1.ResourceName{"vendor.example/gpu"},
		},
		"only in allocatable": {
			node: node(nil, list("example.com/gopher"), managedStatus(contract.ControllerFieldOwner, "status", ours)),
			want: []corev1.ResourceName{"example.com/gopher"},
		},
		"never a native or kubernetes.io resource, whoever owns it": {
			node: node(list("cpu", "devices.kubernetes.io/gpu", "requests.example.com/x", "example.com/gopher"), nil,
				managedStatus(contract.ControllerFieldOwner, "status", `{"f:status":{"f:capacity":{"f:cpu":{},"f:devices.kubernetes.io/gpu":{}}}}`)),
			devices: []corev1.ResourceName{"cpu", "requests.example.com/x", "example.com/gopher"},
			want:    []corev1.ResourceName{"example.com/gopher"},
		},
		"nothing published": {
			node:    node(list("cpu"), list("cpu"), managedStatus(contract.ControllerFieldOwner, "status", ours)),
			devices: []corev1.ResourceName{"example.com/gopher"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := publishedResources(tc.node, tc.devices)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	t.Run("malformed managed fields", func(t *testing.T) {
		if _, err := publishedResources(node(nil, nil, managedStatus(contract.ControllerFieldOwner, "status", `{"f:status":[]}`)), nil); err == nil {
			t.Error("no error")
		}
	})
}

func TestLeaseWatch(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	held := func(rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To("controller-0"), LeaseDurationSeconds: ptr.To[int32](15),
				// Far in the past by this clock: a skewed clock must not make the Lease expired.
				RenewTime: &metav1.MicroTime{Time: start.Add(-time.Hour)},
			},
		}
	}
	type read struct {
		lease *coordinationv1.Lease
		after time.Duration
		want  ControllerState
	}
	cases := map[string][]read{
		"absent":   {{lease: nil, want: ControllerNoLease}},
		"released": {{lease: &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}}, want: ControllerReleased}},
		"held, then unchanged for longer than its duration": {
			{lease: held("1"), want: ""},
			{lease: held("1"), after: 15 * time.Second, want: ""},
			{lease: held("1"), after: 16 * time.Second, want: ControllerExpired},
		},
		"renewed while watched": {
			{lease: held("1"), want: ""},
			{lease: held("2"), after: 10 * time.Second, want: ""},
			{lease: held("2"), after: 20 * time.Second, want: ""},
			{lease: held("2"), after: 26 * time.Second, want: ControllerExpired},
		},
		"held, then released": {
			{lease: held("1"), want: ""},
			{lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}}, after: time.Second, want: ControllerReleased},
		},
	}
	for name, reads := range cases {
		t.Run(name, func(t *testing.T) {
			var w leaseWatch
			for i, r := range reads {
				if got := w.observe(r.lease, start.Add(r.after)); got != r.want {
					t.Errorf("read %d (after %s): %q, want %q", i, r.after, got, r.want)
				}
			}
		})
	}
}

func TestResultString(t *testing.T) {
	r := Result{
		Controller:        ControllerReleased,
		Nodes:             map[string][]corev1.ResourceName{"n1": {"example.com/gopher", "example.com/x"}},
		NodeDevices:       3,
		FinalizersRemoved: 1,
	}
	want := "Removed 2 kubedevice resources from 1 node, deleted 3 NodeDevices (1 finalizer removed), 0 DeviceAllocations, 0 DeviceClasses and 0 ResourceSlices; the controller: Lease released."
	if got := r.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// An Observed NodeDevice's resource is the kubelet's (observe mode): cleanup never removes it from
// the Node; a managed one's is kubedevice's.
func TestResourcesByNodeLeavesObservedToTheKubelet(t *testing.T) {
	nd := func(node, resource string, path kdv1alpha1.DevicePath) kdv1alpha1.NodeDevice {
		return kdv1alpha1.NodeDevice{
			Spec:   kdv1alpha1.NodeDeviceSpec{NodeName: node, ResourceName: resource},
			Status: kdv1alpha1.NodeDeviceStatus{Path: path},
		}
	}
	got := resourcesByNode([]kdv1alpha1.NodeDevice{
		nd("n1", "example.com/gopher", ""),
		nd("n1", "example.com/managed", kdv1alpha1.DevicePathNodeCapacity),
		nd("n2", "example.com/gopher", kdv1alpha1.DevicePathObserved),
	})
	want := map[string][]corev1.ResourceName{"n1": {"example.com/gopher", "example.com/managed"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resourcesByNode (-want +got):\n%s", diff)
	}
}
