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
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/remediation"
)

// The controllers' flags land in Options, the agent namespace defaulting to $POD_NAMESPACE, the
// remediation policy off.
func TestAddFlags(t *testing.T) {
	rem := RemediationOptions{NodeInterval: DefaultRemediationNodeInterval, ClusterInterval: DefaultRemediationClusterInterval}
	for name, tc := range map[string]struct {
		env  string
		args []string
		want Options
	}{
		"defaults": {"", nil, Options{AgentNamespace: DefaultAgentNamespace, AgentLeaseDuration: DefaultAgentLeaseDuration, Workers: DefaultWorkers, Remediation: rem}},
		"env":      {"ns1", nil, Options{AgentNamespace: "ns1", AgentLeaseDuration: DefaultAgentLeaseDuration, Workers: DefaultWorkers, Remediation: rem}},
		"flags": {"ns1", []string{"--agent-namespace=ns2", "--agent-lease-duration=1m", "--workers=8"},
			Options{AgentNamespace: "ns2", AgentLeaseDuration: time.Minute, Workers: 8, Remediation: rem}},
		"remediation": {"", []string{"--remediate=example.com/gopher=5m", "--remediate=example.com/gpu=90s",
			"--remediation-node-interval=10m", "--remediation-cluster-interval=1m"},
			Options{AgentNamespace: DefaultAgentNamespace, AgentLeaseDuration: DefaultAgentLeaseDuration, Workers: DefaultWorkers,
				Remediation: RemediationOptions{
					Policy:       remediation.Policy{"example.com/gopher": 5 * time.Minute, "example.com/gpu": 90 * time.Second},
					NodeInterval: 10 * time.Minute, ClusterInterval: time.Minute,
				}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.env)
			var got Options
			fs := flag.NewFlagSet("kubedevice-controller", flag.ContinueOnError)
			got.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

// The start-up log line shows the controllers' settings, the remediation policy's included.
func TestLogValues(t *testing.T) {
	o := Options{AgentNamespace: "ns1", AgentLeaseDuration: time.Minute, Workers: 8,
		Remediation: RemediationOptions{Policy: remediation.Policy{"example.com/gopher": 5 * time.Minute}}}
	got := o.LogValues()
	want := []any{"agentNamespace", "ns1", "agentLeaseDuration", time.Minute, "workers", 8, "remediate", o.Remediation.Policy.String()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log values (-want +got):\n%s", diff)
	}
	if !strings.Contains(o.Remediation.Policy.String(), "example.com/gopher=5m") {
		t.Errorf("remediate %q does not name the policy", o.Remediation.Policy.String())
	}
}
