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

package kube

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// unstructuredApply is how the agent built its apply requests before applyBody: the object
// converted to a map, its metadata cut to name, namespace, labels, owner references and
// finalizers, and the fields of the other half (drop) removed; on the status subresource labels,
// owner references and finalizers too.
func unstructuredApply(t *testing.T, gvk schema.GroupVersionKind, obj client.Object, drop string, withRefs bool) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if withRefs {
		for _, f := range []string{"labels", "ownerReferences", "finalizers"} {
			if v, ok := m["metadata"].(map[string]any)[f]; ok {
				meta[f] = v
			}
		}
	}
	m["metadata"] = meta
	delete(m, drop)
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u.Object
}

// TestApplyBody checks that the apply requests the agent sends say what the unstructured
// conversion said, field for field, for both kinds and both halves of an object.
func TestApplyBody(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 26, 15, 4, 5, 0, time.UTC))
	nd := testutil.MakeNodeDevice("node-1-gopher-0").Node("node-1").Resource("example.com/gopher").Shard(0).
		Cordon("dev-1", "broken fan").
		Device("dev-0", kdv1alpha1.DeviceHealthy, 0, 1).Device("dev-1", kdv1alpha1.DeviceUnhealthy).
		Plugin(kdv1alpha1.PluginStateRegistered).Path(kdv1alpha1.DevicePathNodeCapacity).Obj()
	nd.Labels = map[string]string{kdv1alpha1.LabelNodeName: "node-1"}
	nd.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "u-1"}}
	nd.Finalizers = []string{contract.NodeCapacityFinalizer}
	nd.ResourceVersion = "12"
	nd.Status.Devices[0].LastTransitionTime = &now
	nd.Status.Devices[0].Holder = &kdv1alpha1.DeviceHolder{Namespace: "ns", PodName: "p", PodUID: "uid", ContainerName: "c"}
	nd.Status.Checkpoint = &kdv1alpha1.CheckpointStatus{BootID: "boot", LastWriteTime: &now}
	nd.Status.Conditions = []metav1.Condition{{Type: kdv1alpha1.NodeDeviceRegistered, Status: metav1.ConditionTrue,
		Reason: kdv1alpha1.ReasonPluginRegistered, Message: "m", LastTransitionTime: now, ObservedGeneration: 3}}
	nd.Status.ObservedGeneration = 3
	da := testutil.MakeDeviceAllocation("pod-1", "ns").Container("c", "example.com/gopher", "dev-0").Obj()
	da.Labels = map[string]string{kdv1alpha1.LabelNodeName: "node-1"}
	da.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod-1", UID: "u-2", Controller: ptr.To(true)}}
	empty := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}

	for name, c := range map[string]struct {
		gvk schema.GroupVersionKind
		obj client.Object
	}{
		"NodeDevice":       {NodeDeviceGVK, nd},
		"DeviceAllocation": {DeviceAllocationGVK, da},
		"empty NodeDevice": {NodeDeviceGVK, empty},
	} {
		for _, half := range []struct {
			drop     string
			withRefs bool
		}{{"status", true}, {"spec", false}, {"", true}} {
			body, err := applyBody(c.gvk, c.obj, half.drop, half.withRefs)
			if err != nil {
				t.Fatalf("%s without %s: %v", name, half.drop, err)
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s without %s: %v", name, half.drop, err)
			}
			// Through JSON, as the request carries it: numbers and times compare as sent.
			wantJSON, err := json.Marshal(unstructuredApply(t, c.gvk, c.obj, half.drop, half.withRefs))
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			if err := json.Unmarshal(wantJSON, &want); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s without %s:\n got %s\nwant %s", name, half.drop, body, wantJSON)
			}
		}
	}
}
