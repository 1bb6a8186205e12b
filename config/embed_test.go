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

package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEmbeddedManifests(t *testing.T) {
	tests := map[string]struct {
		read func() ([]File, error)
		want []string
	}{
		"CRDs": {
			read: CRDs,
			want: []string{"crd/bases/kubedevice.io_deviceallocations.yaml", "crd/bases/kubedevice.io_nodedevices.yaml"},
		},
		"admission policies, without the kustomization": {
			read: AdmissionPolicies,
			want: []string{"admission/agent_node_restriction.yaml", "admission/controller_node_status.yaml",
				"admission/pod_injection_gate.yaml",
				"admission/pod_injection_gate_params.yaml"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			files, err := tc.read()
			if err != nil {
				t.Fatalf("reading: %v", err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				if !strings.Contains(string(f.Data), "apiVersion:") {
					t.Errorf("%s does not look like a manifest", f.Name)
				}
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}
