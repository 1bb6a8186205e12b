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
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/allocpolicy/allocpolicytest"
)

// The DeviceAllocation CRD's limits on runtimeOptions (api/v1alpha1/deviceallocation_types.go
// markers), spelled out here so that a change to either side shows.
const (
	crdMaxItems       = 1024
	crdMaxPath        = 4096
	crdMaxEnvName     = 4096
	crdMaxValue       = 32768
	crdMaxAnnotKey    = 317
	crdMaxPermissions = 3
	crdMaxCDIName     = 4096
)

// FuzzAllocateResponseStatus decodes a plugin's container response from fuzz bytes, and when
// allocpolicy accepts it, records it as the core does and converts the merged options into the
// DeviceAllocation status. Properties: it never panics; an accepted response is always recorded;
// its status satisfies every MaxItems and MaxLength of the CRD (in characters, as the API
// server counts) and round-trips back to the same options.
func FuzzAllocateResponseStatus(f *testing.F) {
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
		ro := apiRuntimeOptions(opts)
		if ro == nil {
			return
		}
		tooLong := func(what, s string, limit int) {
			t.Helper()
			if utf8.RuneCountInString(s) > limit {
				t.Fatalf("%s has %d characters, the CRD allows %d", what, utf8.RuneCountInString(s), limit)
			}
		}
		for what, n := range map[string]int{"envs": len(ro.Envs), "mounts": len(ro.Mounts), "devices": len(ro.Devices),
			"annotations": len(ro.Annotations), "cdiDevices": len(ro.CDIDevices)} {
			if n > crdMaxItems {
				t.Fatalf("%s has %d items, the CRD allows %d", what, n, crdMaxItems)
			}
		}
		for _, e := range ro.Envs {
			tooLong("env name", e.Name, crdMaxEnvName)
			tooLong("env value", e.Value, crdMaxValue)
		}
		for _, m := range ro.Mounts {
			tooLong("mount containerPath", m.ContainerPath, crdMaxPath)
			tooLong("mount hostPath", m.HostPath, crdMaxPath)
		}
		for _, d := range ro.Devices {
			tooLong("device containerPath", d.ContainerPath, crdMaxPath)
			tooLong("device hostPath", d.HostPath, crdMaxPath)
			tooLong("device permissions", d.Permissions, crdMaxPermissions)
		}
		for _, a := range ro.Annotations {
			tooLong("annotation key", a.Key, crdMaxAnnotKey)
			tooLong("annotation value", a.Value, crdMaxValue)
		}
		for _, c := range ro.CDIDevices {
			tooLong("CDI device", c, crdMaxCDIName)
		}
		if diff := cmp.Diff(opts, coreRuntimeOptions(ro)); diff != "" {
			t.Fatalf("runtime options do not round-trip through the status (-recorded +rebuilt):\n%s", diff)
		}
	})
}
