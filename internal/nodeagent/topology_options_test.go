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

package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// writeSysfsNUMA makes a fake sysfs under a temporary root with one
// node<N> directory per row of distances (the node's distance file; nil
// for none) and returns the root.
func writeSysfsNUMA(t *testing.T, distances map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for n, d := range distances {
		dir := filepath.Join(root, "sys/devices/system/node", fmt.Sprintf("node%d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if d != "" {
			if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(d+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// New refuses, as the kubelet's topology manager does, a policy other than
// none on a machine with more NUMA nodes than max-allowable-numa-nodes, and
// prefer-closest-numa-nodes without readable distances.
func TestNewTopologyPolicyOptions(t *testing.T) {
	nine := map[int]string{}
	for n := range 9 {
		nine[n] = ""
	}
	cases := map[string]struct {
		nodes   map[int]string
		policy  topology.Policy
		opts    topology.PolicyOptions
		wantErr bool
	}{
		"9 nodes, best-effort, default max":  {nodes: nine, policy: topology.PolicyBestEffort, wantErr: true},
		"9 nodes, restricted, max 9":         {nodes: nine, policy: topology.PolicyRestricted, opts: topology.PolicyOptions{MaxAllowableNUMANodes: 9}},
		"9 nodes, none":                      {nodes: nine, policy: topology.PolicyNone},
		"prefer closest, distances missing":  {nodes: map[int]string{0: "", 1: ""}, policy: topology.PolicyBestEffort, opts: topology.PolicyOptions{PreferClosestNUMA: true}, wantErr: true},
		"prefer closest, distances readable": {nodes: map[int]string{0: "10 11", 1: "11 10"}, policy: topology.PolicyBestEffort, opts: topology.PolicyOptions{PreferClosestNUMA: true}},
		"max below the kubelet's minimum":    {nodes: map[int]string{0: ""}, policy: topology.PolicyBestEffort, opts: topology.PolicyOptions{MaxAllowableNUMANodes: 4}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := Config{
				PluginDir: t.TempDir(), SysRoot: writeSysfsNUMA(t, tc.nodes),
				TopologyPolicy: tc.policy, TopologyPolicyOptions: tc.opts,
			}
			m, err := New(cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New() error = %v, want error: %t", err, tc.wantErr)
			}
			if m != nil {
				m.Stop()
			}
			if tc.wantErr && !tc.opts.PreferClosestNUMA && tc.opts.MaxAllowableNUMANodes == 0 && !errors.Is(err, topology.ErrTooManyNUMANodes) {
				t.Errorf("New() error = %v, want ErrTooManyNUMANodes", err)
			}
		})
	}
}

// With prefer-closest-numa-nodes a two-device request goes to the two NUMA
// nodes closest to each other (2 and 3) instead of the lowest-numbered pair
// (0 and 2), end to end through a plugin.
func TestPreferClosestNUMAAllocation(t *testing.T) {
	distances := map[int]string{
		0: "10 20 30 30",
		1: "20 10 30 30",
		2: "30 30 10 11",
		3: "30 30 11 10",
	}
	devs := []*pluginapi.Device{numaDevice("d0", 0), numaDevice("d2", 2), numaDevice("d3", 3)}
	for name, tc := range map[string]struct {
		opts topology.PolicyOptions
		want sets.Set[string]
	}{
		"narrowest":      {want: sets.New("d0", "d2")},
		"prefer closest": {opts: topology.PolicyOptions{PreferClosestNUMA: true}, want: sets.New("d2", "d3")},
	} {
		t.Run(name, func(t *testing.T) {
			root := writeSysfsNUMA(t, distances)
			tm := newAllocManager(t, withTopology(topology.PolicyRestricted, topology.ScopeContainer), withConfig(func(c *Config) {
				c.SysRoot, c.TopologyPolicyOptions = root, tc.opts
			}))
			startPlugin(t, tm, "r.sock", res1, false, false, devs...)
			pod := makePod("p").container("c", req{res1, 2}).obj()
			if err := tm.AllocatePod(tm.ctx, pod); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, tm.containerDevices(pod, "c", res1)); diff != "" {
				t.Errorf("allocated devices (-want +got):\n%s", diff)
			}
		})
	}
}
