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

package poddevices

import (
	"fmt"
	"testing"
)

// benchStore returns a Store holding 100 pods × 4 containers × 2 resources, one device each, with
// responses shaped like a GPU and a NIC plugin's (a few envs, a mount, a device node, an
// annotation, a CDI device).
func benchStore(b *testing.B) *Store {
	b.Helper()
	s := New()
	for p := range 100 {
		pod := fmt.Sprintf("pod-%03d", p)
		for c := range 4 {
			container := fmt.Sprintf("c%d", c)
			for r, resource := range []string{"example.com/gpu", "example.com/nic"} {
				id := fmt.Sprintf("%s-%d-%d", resource, p, c)
				resp := newResp().
					Env("VISIBLE_DEVICES", id).Env(fmt.Sprintf("RES_%d", r), "1").Env("SHARED", "x").
					Mount("/usr/lib/"+resource, "/opt/"+resource, true).
					Device("/dev/"+id, "/dev/"+id, "rw").
					Annotation(resource+"/id", id).
					CDI(resource + "=" + id).Obj()
				allocate(b, s, pod, container, resource, map[int64][]string{int64(c % 2): {id}}, resp)
			}
		}
	}
	return s
}

func BenchmarkRunContainerOptions(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		if opts, _ := s.RunContainerOptions("pod-050", "c2"); opts == nil {
			b.Fatal("no options")
		}
	}
}

func BenchmarkDevices(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		if d := s.Devices(); len(d) != 2 {
			b.Fatalf("Devices has %d resources", len(d))
		}
	}
}

func BenchmarkEntries(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		if e := s.Entries(); len(e) != 800 {
			b.Fatalf("Entries has %d entries", len(e))
		}
	}
}

// BenchmarkReserveRollback measures the cost the allocation transaction adds per device.
func BenchmarkReserveRollback(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Reserve("pod-new", "c0", "example.com/gpu", "free-0", "free-1"); err != nil {
			b.Fatal(err)
		}
		s.Rollback("pod-new", "c0", "example.com/gpu")
	}
}
