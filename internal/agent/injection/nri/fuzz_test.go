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
	"slices"
	"strings"
	"testing"

	"github.com/kubedevice/kubedevice/internal/allocpolicy/allocpolicytest"
)

// FuzzAllocateResponseAdjustment decodes a plugin's container response from fuzz bytes, and when
// allocpolicy accepts it, records it as the core does and turns the merged options into the NRI
// adjustment, every device host path standing for a character device. Properties: it never
// panics; an accepted response always gives an adjustment, without error; the adjustment holds
// every env, mount, device, annotation and CDI device of the options, and each device's cgroup
// rules allow exactly the plugin's permissions ("rwm" when it gave none).
func FuzzAllocateResponseAdjustment(f *testing.F) {
	for _, b := range allocpolicytest.Seeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		opts, ok, err := allocpolicytest.Options(msg)
		if !ok {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if opts == nil {
			return
		}
		stats := newStatCache(t.TempDir())
		minor := map[string]int64{} // one node per host path
		perms := map[string][]string{}
		for _, d := range opts.Devices {
			if _, ok := minor[d.HostPath]; !ok {
				minor[d.HostPath] = int64(len(minor))
				stats.nodes[d.HostPath] = hostDevice{typ: "c", major: 10, minor: minor[d.HostPath], mode: 0o666}
			}
			want := d.Permissions
			if want == "" {
				want = defaultPermissions
			}
			perms[d.HostPath] = append(perms[d.HostPath], want)
		}
		adj, err := adjustment(opts, stats)
		if err != nil {
			t.Fatalf("adjustment of accepted options: %v", err)
		}
		if len(adj.GetEnv()) != len(opts.Envs) || len(adj.GetMounts()) != len(opts.Mounts) ||
			len(adj.GetAnnotations()) != len(opts.Annotations) || len(adj.GetCDIDevices()) != len(opts.CDIDevices) ||
			len(adj.GetLinux().GetDevices()) != len(opts.Devices) {
			t.Fatalf("adjustment %v does not hold every option of %+v", adj, opts)
		}
		rules := adj.GetLinux().GetResources().GetDevices()
		for host, n := range minor {
			if len(slices.Compact(slices.Clone(perms[host]))) > 1 {
				continue // one node, different permissions: the cgroup holds one rule per node
			}
			// NRI allows "rw" on every character device it adds, then the adjustment's rules
			// apply in order.
			allowed := map[rune]bool{'r': true, 'w': true}
			for _, r := range rules {
				if r.GetType() != "c" || r.GetMajor().GetValue() != 10 || r.GetMinor().GetValue() != n {
					continue
				}
				for _, a := range r.GetAccess() {
					allowed[a] = r.GetAllow()
				}
			}
			for _, a := range "rwm" {
				if strings.ContainsRune(perms[host][0], a) != allowed[a] {
					t.Fatalf("device node %s with permissions %q: the cgroup rules give %v", host, perms[host][0], allowed)
				}
			}
		}
	})
}
