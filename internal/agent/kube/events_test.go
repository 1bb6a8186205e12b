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
	"strings"
	"testing"
)

func TestEventAction(t *testing.T) {
	a := EventAction("AllocateDevices", "Requested: 5, Available: 4")
	if a != EventAction("AllocateDevices", "Requested: 5, Available: 4") {
		t.Error("the same note gives another action")
	}
	if a == EventAction("AllocateDevices", "Requested: 5, Available: 3") {
		t.Error("two notes give one action")
	}
	if !strings.HasPrefix(a, "AllocateDevices-") || len(a) > 128 {
		t.Errorf("action %q: want AllocateDevices-<hash>, at most 128 characters (the API's bound)", a)
	}
}
