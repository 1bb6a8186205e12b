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
