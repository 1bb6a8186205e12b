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

package remediation

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestPolicyFlag(t *testing.T) {
	var p Policy
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Var(&p, "remediate", "")
	if err := fs.Parse([]string{"--remediate=example.com/gopher=5m", "--remediate", "nvidia.com/gpu=90s"}); err != nil {
		t.Fatal(err)
	}
	if p["example.com/gopher"] != 5*time.Minute || p["nvidia.com/gpu"] != 90*time.Second || len(p) != 2 {
		t.Errorf("policy %v", p)
	}
	if got, want := p.String(), "example.com/gopher=5m0s,nvidia.com/gpu=1m30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestPolicyFlagRejects(t *testing.T) {
	for value, want := range map[string]string{
		"example.com/gopher":      "want RESOURCE=GRACE",
		"gopher=5m":               "not an extended resource name",
		"example.com/gopher=soon": "invalid duration",
		"example.com/gopher=0s":   "must be positive",
		"example.com/go pher=5m":  "not an extended resource name",
		"=5m":                     "want RESOURCE=GRACE",
	} {
		p := Policy{"example.com/other": time.Minute}
		err := p.Set(value)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set(%q) = %v, want an error saying %q", value, err, want)
		}
	}
	p := Policy{}
	if err := p.Set("example.com/gopher=1m"); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("example.com/gopher=2m"); err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("a resource named twice: %v", err)
	}
}
