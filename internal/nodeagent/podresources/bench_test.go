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

package podresources

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// BenchmarkList measures a List over the socket, as a monitoring agent calls it, of a node with
// 100 pods (a sidecar and an app container each) holding one device each, on 2 NUMA nodes, from
// a real core.
func BenchmarkList(b *testing.B) {
	const pods = 100
	core := newCore(b)
	devs := make([]*pluginapi.Device, pods)
	for i := range devs {
		devs[i] = dptest.Device(fmt.Sprintf("gpu-%03d", i), pluginapi.Healthy, int64(i%2))
	}
	startPlugin(b, core, resA, devs...)
	provider := &fakePods{}
	var all []*corev1.Pod
	for i := range pods {
		pod := testutil.MakePod(fmt.Sprintf("p-%03d", i), "ml").UID(types.UID(fmt.Sprintf("uid-%03d", i))).
			Request(resA, 1).SidecarContainer("logger", "", 0).Obj()
		allocate(b, core, pod)
		all = append(all, pod)
	}
	provider.set(all...)
	_, c := serve(b, provider, core, Options{QPS: 1e9, Burst: 1e9})
	ctx := callCtx(b)

	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.GetPodResources()) != pods {
			b.Fatalf("List returned %d pods, want %d", len(resp.GetPodResources()), pods)
		}
	}
}
