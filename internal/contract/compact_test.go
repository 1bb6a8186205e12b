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

package contract

import (
	"encoding/json"
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// TestCompactNodeDevice decodes two NodeDevices as the cache does and wants them unchanged but
// for their managed fields, with each distinct health, reason and message held once.
func TestCompactNodeDevice(t *testing.T) {
	decode := func(name string) *kdv1alpha1.NodeDevice {
		t.Helper()
		nd := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: name,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubedevice-agent"}}}}
		for i := range 3 {
			nd.Status.Devices = append(nd.Status.Devices, kdv1alpha1.DeviceStatus{
				ID: fmt.Sprintf("%s-dev-%d", name, i), Health: kdv1alpha1.DeviceHealthy,
				Reason: "ReportedHealthy", Message: "The device plugin reports the device healthy.", NUMANodes: []int64{int64(i)},
			})
		}
		nd.Status.Devices[2].Health, nd.Status.Devices[2].Reason = kdv1alpha1.DeviceUnhealthy, "ReportedUnhealthy"
		b, err := json.Marshal(nd)
		if err != nil {
			t.Fatal(err)
		}
		out := &kdv1alpha1.NodeDevice{}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := decode("a"), decode("b")
	want := a.DeepCopy()
	want.ManagedFields = nil
	if _, err := CompactNodeDevice(a); err != nil {
		t.Fatal(err)
	}
	if _, err := CompactNodeDevice(b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("CompactNodeDevice changed the object (-want +got):\n%s", diff)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	for i := range a.Status.Devices {
		da, db := a.Status.Devices[i], b.Status.Devices[i]
		if !same(string(da.Health), string(db.Health)) || !same(da.Reason, db.Reason) || !same(da.Message, db.Message) {
			t.Errorf("device %d: the two objects' health, reason and message are not one copy each", i)
		}
	}
	if !same(a.Status.Devices[0].Message, a.Status.Devices[1].Message) {
		t.Error("two devices of one object do not share their message")
	}
	if got, err := CompactNodeDevice("not a NodeDevice"); err != nil || got != "not a NodeDevice" {
		t.Errorf("CompactNodeDevice of another type = %v, %v; want it back unchanged", got, err)
	}
}
