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
	"testing"

	"github.com/google/go-cmp/cmp"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// recordingCordoner records what the mirror hands to the core.
type recordingCordoner struct{ calls [][]string }

func (c *recordingCordoner) SetCordons(_ string, ids []string) { c.calls = append(c.calls, ids) }

// The cordons are handed to the core only when they change, so a steady reconcile does not touch
// the core; forgetting a removed resource hands them again when it comes back.
func TestCordonPush(t *testing.T) {
	core := &recordingCordoner{}
	p := newCordonPush(core)
	shard := func(ids ...string) kdv1alpha1.NodeDevice {
		var nd kdv1alpha1.NodeDevice
		for _, id := range ids {
			nd.Spec.Cordons = append(nd.Spec.Cordons, kdv1alpha1.DeviceCordon{DeviceID: id})
		}
		return nd
	}
	p.push(testResource, []kdv1alpha1.NodeDevice{shard("b"), shard("a", "b")})
	p.push(testResource, []kdv1alpha1.NodeDevice{shard("a", "b")})
	p.push(testResource, nil)
	p.forget(testResource)
	p.push(testResource, nil)
	want := [][]string{{"a", "b"}, nil, nil}
	if diff := cmp.Diff(want, core.calls); diff != "" {
		t.Errorf("cordons handed to the core (-want +got):\n%s", diff)
	}
}
