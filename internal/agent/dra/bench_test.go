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

package dra

import (
	"fmt"
	"testing"
)

// BenchmarkPrepareUnprepare measures one claim's prepare (the plugin's Allocate over its unix
// socket, the checkpoint fsync'd, the CDI spec written) and unprepare (the spec removed, the free
// fsync'd), the work the kubelet waits for around a DRA pod's start and end.
//
//	go test ./internal/agent/dra/ -run '^$' -bench PrepareUnprepare -benchtime 200x
func BenchmarkPrepareUnprepare(b *testing.B) {
	n := newNode(b, "")
	n.plugin(gopher, "gopher-0", "gopher-1")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := claim(fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i), "c", gopher, map[string][]string{"r": {"gopher-1"}})
		if r := n.prepare(c); r.Err != nil {
			b.Fatal(r.Err)
		}
		if err := n.unprepare(c); err != nil {
			b.Fatal(err)
		}
	}
}
