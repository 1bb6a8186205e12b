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

package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestDeviceClassName(t *testing.T) {
	long := strings.Repeat("x", 63)
	cases := map[string]string{
		"example.com/gopher":  "gopher.example.com",
		"nvidia.com/gpu":      "gpu.nvidia.com",
		"example.com/Big_GPU": "big-gpu-",
		"example.com/gpu.big": "gpu-big-",
		"big.example.com/gpu": "gpu.big.example.com",
		"example.com/" + long: "x",
	}
	seen := map[string]string{}
	for resource, prefix := range cases {
		got := deviceClassName(resource)
		if !strings.HasPrefix(got, prefix) {
			t.Errorf("deviceClassName(%q) = %q, want it to start with %q", resource, got, prefix)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("deviceClassName(%q) = %q is not a DNS subdomain: %v", resource, got, errs)
		}
		if got != deviceClassName(resource) {
			t.Errorf("deviceClassName(%q) is not deterministic", resource)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("deviceClassName(%q) = deviceClassName(%q) = %q", resource, other, got)
		}
		seen[got] = resource
	}
	// A name part that sanitizes like a plain one keeps a hash, so the two never meet.
	if a, b := deviceClassName("example.com/Gopher"), deviceClassName("example.com/gopher"); a == b {
		t.Errorf("example.com/Gopher and example.com/gopher both map to %q", a)
	}
}
