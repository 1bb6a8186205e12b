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
	"strings"
	"testing"
)

func TestParseResources(t *testing.T) {
	r, err := ParseResources([]string{"example.com/gopher, acme.io/*", "", "vendor.example.com/gpu"})
	if err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]bool{
		"example.com/gopher":     true,
		"example.com/other":      false,
		"acme.io/fpga":           true,
		"sub.acme.io/fpga":       false,
		"vendor.example.com/gpu": true,
		"cpu":                    false,
	} {
		if got := r.Match(res); got != want {
			t.Errorf("Match(%q) = %v, want %v", res, got, want)
		}
	}
	if r.String() != "example.com/gopher,acme.io/*,vendor.example.com/gpu" {
		t.Errorf("String() = %q", r.String())
	}
	all, _ := ParseResources([]string{"*"})
	if !all.Match("x.io/y") || all.Match("x.io/"+strings.Repeat("y", 60)) {
		t.Error("* must match every resource whose name fits a device attribute (64 characters)")
	}
	var none Resources
	if none.Any() || none.Match("example.com/gopher") {
		t.Error("the zero value must match nothing")
	}
	for _, bad := range []string{"gopher", "kubernetes.io/foo", "Example_.com/*", "example.com/go*", "x.io/" + strings.Repeat("y", 60)} {
		if _, err := ParseResources([]string{bad}); err == nil {
			t.Errorf("ParseResources(%q) succeeded; want an error", bad)
		}
	}
}
