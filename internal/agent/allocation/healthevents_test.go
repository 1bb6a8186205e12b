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
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

func TestReportHealth(t *testing.T) {
	pod := testutil.MakePod("p", "ns").Node("n1").InitContainer("init", testResource, 1).Request(testResource, 2).Obj()
	// dev-0 and dev-1 are the device plugin path's; claim-0 a DRA claim's, which the kubelet reports.
	alloc := &nodeagent.PodAllocation{PodUID: "uid-1", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{
		{Name: "app", Resources: []nodeagent.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0", "dev-1"}}}},
		{Name: "init", Resources: []nodeagent.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0"}}}},
	}}
	entry := func(id, reason string, containers ...string) kdv1alpha1.UnhealthyDevice {
		return kdv1alpha1.UnhealthyDevice{ResourceName: testResource, DeviceID: id, Containers: containers, Reason: reason, Message: "m"}
	}
	current := &kdv1alpha1.DeviceAllocation{Status: kdv1alpha1.DeviceAllocationStatus{UnhealthyDevices: []kdv1alpha1.UnhealthyDevice{
		entry("dev-1", kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app"),
		entry("claim-0", kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app"),
	}}}
	st := kdv1alpha1.DeviceAllocationStatus{UnhealthyDevices: []kdv1alpha1.UnhealthyDevice{
		entry("dev-0", kdv1alpha1.DeviceReasonNotReported, "init", "app"),
		entry("claim-1", kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app"),
	}}
	rec := events.NewFakeRecorder(10)
	r := &reconciler{Options: Options{Recorder: rec, Clock: clock.RealClock{}}}
	r.reportHealth(pod, current, st, alloc)
	r.reportHealth(pod, &kdv1alpha1.DeviceAllocation{Status: st}, st, alloc)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning DeviceUnhealthy Containers init, app: device dev-0 of example.com/gopher is unhealthy: NotReportedByPlugin: m",
		"Normal DeviceHealthy Container app: device dev-1 of example.com/gopher is healthy again (it was PluginReportedUnhealthy).",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
