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

package mirror

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// TestDeviceStatusEqual checks deviceStatusEqual against equality.Semantic.DeepEqual, which it
// replaces, for a change of every field; a field added to DeviceStatus fails it until the
// comparison and this table name it.
func TestDeviceStatusEqual(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	base := kdv1alpha1.DeviceStatus{
		ID: "gopher-0", Health: kdv1alpha1.DeviceHealthy, Reason: "Healthy", Message: "ok",
		LastTransitionTime: &at, NUMANodes: []int64{0, 1}, Cordoned: true,
		Holder: &kdv1alpha1.DeviceHolder{Namespace: "ns", PodName: "p", PodUID: "u", ContainerName: "c"},
	}
	if n := reflect.TypeFor[kdv1alpha1.DeviceStatus]().NumField(); n != 8 {
		t.Fatalf("DeviceStatus has %d fields: compare the new ones in deviceStatusEqual and change them here", n)
	}
	later := metav1.NewTime(at.Add(time.Second))
	sameInstant := metav1.NewTime(at.In(time.FixedZone("x", 3600)))
	cases := map[string]func(d *kdv1alpha1.DeviceStatus){
		"same":                     func(*kdv1alpha1.DeviceStatus) {},
		"id":                       func(d *kdv1alpha1.DeviceStatus) { d.ID = "gopher-1" },
		"health":                   func(d *kdv1alpha1.DeviceStatus) { d.Health = kdv1alpha1.DeviceUnhealthy },
		"reason":                   func(d *kdv1alpha1.DeviceStatus) { d.Reason = "PluginDisconnected" },
		"message":                  func(d *kdv1alpha1.DeviceStatus) { d.Message = "gone" },
		"time":                     func(d *kdv1alpha1.DeviceStatus) { d.LastTransitionTime = &later },
		"time in another zone":     func(d *kdv1alpha1.DeviceStatus) { d.LastTransitionTime = &sameInstant },
		"no time":                  func(d *kdv1alpha1.DeviceStatus) { d.LastTransitionTime = nil },
		"numa":                     func(d *kdv1alpha1.DeviceStatus) { d.NUMANodes = []int64{1} },
		"no numa":                  func(d *kdv1alpha1.DeviceStatus) { d.NUMANodes = nil },
		"cordoned":                 func(d *kdv1alpha1.DeviceStatus) { d.Cordoned = false },
		"holder":                   func(d *kdv1alpha1.DeviceStatus) { d.Holder = &kdv1alpha1.DeviceHolder{Namespace: "ns", PodName: "q"} },
		"holder's container":       func(d *kdv1alpha1.DeviceStatus) { h := *d.Holder; h.ContainerName = "d"; d.Holder = &h },
		"no holder":                func(d *kdv1alpha1.DeviceStatus) { d.Holder = nil },
		"equal copy of the holder": func(d *kdv1alpha1.DeviceStatus) { h := *d.Holder; d.Holder = &h },
	}
	for name, change := range cases {
		b := base
		change(&b)
		want := equality.Semantic.DeepEqual(base, b)
		if got := deviceStatusEqual(base, b); got != want {
			t.Errorf("%s: deviceStatusEqual = %v, equality.Semantic.DeepEqual = %v", name, got, want)
		}
		if got := deviceStatusEqual(b, base); got != want {
			t.Errorf("%s, swapped: deviceStatusEqual = %v, equality.Semantic.DeepEqual = %v", name, got, want)
		}
	}
	empty, none := base, base
	empty.NUMANodes, none.NUMANodes = []int64{}, nil
	if !deviceStatusEqual(empty, none) || !equality.Semantic.DeepEqual(empty, none) {
		t.Error("an empty NUMA list must equal none, as the API server drops it")
	}
}
