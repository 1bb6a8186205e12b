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

package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// benchPods is the number of pods holding devices in the benchmarks' memory.
const benchPods = 1000

// BenchmarkCreateContainer measures the handler as containerd calls it, with 1,000 pods holding
// devices in the index: a container that gets envs, two mounts, a device node (cached stat) with
// its cgroup rule, an annotation and a CDI device; the same for a container whose plugin requires
// PreStartContainer, admitted by its grant (the grant is taken by the first creation, the
// measured ones are that creation asked again: the same lock and lookups); a container of a pod
// without devices; and a container of a pod the index does not know (asked of the pod checker).
func BenchmarkCreateContainer(b *testing.B) {
	const preStartResource = "example.com/prestart"
	index := NewIndex("")
	grants := NewGrants(nil)
	grants.SetRequired(preStartResource, true)
	for i := range benchPods {
		uid := fmt.Sprintf("uid-%04d", i)
		index.SetReady(uid, "ns", "pod-"+uid, map[string]Container{"app": {Options: gopherOptions(), Resources: []string{gopherResource}}})
		index.SetReady("pre-"+uid, "ns", "pre-"+uid, map[string]Container{"app": {Options: gopherOptions(), Resources: []string{preStartResource}}})
		grants.Grant("ns", "pre-"+uid, "pre-"+uid, "app", "")
		index.SetNoDevices("plain-"+uid, "ns", "plain-"+uid)
	}
	p := &plugin{name: PluginName, index: index, grants: grants, pods: &fakePods{}, logger: logr.Discard()}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		pod  func(i int) *api.PodSandbox
		want int
	}{
		{"injected", func(i int) *api.PodSandbox { return sandbox(fmt.Sprintf("uid-%04d", i%benchPods), "ns", "pod", nil) }, 2},
		{"injected-prestart-granted", func(i int) *api.PodSandbox {
			uid := fmt.Sprintf("pre-uid-%04d", i%benchPods)
			return sandbox(uid, "ns", uid, nil)
		}, 2},
		{"untouched", func(i int) *api.PodSandbox {
			return sandbox(fmt.Sprintf("plain-uid-%04d", i%benchPods), "ns", "plain", nil)
		}, 0},
		{"unknown", func(i int) *api.PodSandbox {
			return sandbox(fmt.Sprintf("other-%04d", i%benchPods), "ns", "other", nil)
		}, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pods := make([]*api.PodSandbox, benchPods)
			ctrs := make([]*api.Container, benchPods)
			for i := range pods {
				pods[i] = bc.pod(i)
				ctrs[i] = &api.Container{Id: pods[i].GetUid() + "-app", Name: "app"}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				adj, _, err := p.CreateContainer(ctx, pods[i%benchPods], ctrs[i%benchPods])
				if err != nil {
					b.Fatal(err)
				}
				if len(adj.GetEnv()) != bc.want {
					b.Fatalf("got %d envs, want %d", len(adj.GetEnv()), bc.want)
				}
			}
		})
	}
}

// BenchmarkCorePodAllocation measures the alternative to the index: asking the device manager
// core for the pod's allocation (PodAllocation), with 1,000 pods holding devices. The core copies
// the pod's entries and merges its runtime options under its lock, which allocations wait for: a
// few µs more than the index, and contention the handler does not need.
func BenchmarkCorePodAllocation(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("3d1c6a3e-6a5f-4f7e-9d2c-1b2a3c4d5e6f\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := nodeagent.DefaultConfig()
	cfg.PluginDir, cfg.StateDir = dir, dir
	cfg.PluginsRegistryDir = ""
	cfg.BootIDPath = filepath.Join(dir, "boot_id")
	cfg.Registerer = prometheus.NewRegistry()
	dm, err := nodeagent.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	allocs := make([]nodeagent.PodAllocation, benchPods)
	for i := range allocs {
		allocs[i] = nodeagent.PodAllocation{
			PodUID: fmt.Sprintf("uid-%04d", i), Namespace: "ns", Name: fmt.Sprintf("pod-%04d", i),
			Containers: []nodeagent.ContainerAllocation{{
				Name:           "app",
				Resources:      []nodeagent.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{fmt.Sprintf("g%04d", i)}}},
				RuntimeOptions: gopherOptions(),
			}},
		}
	}
	if err := dm.RestoreAllocations(allocs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, ok := dm.PodAllocation(allocs[i%benchPods].PodUID); !ok {
			b.Fatal("no allocation")
		}
	}
}
