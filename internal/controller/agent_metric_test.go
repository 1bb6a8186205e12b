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
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// TestAgentReadyMetric checks kubedevice_node_agent_ready: one series per node with NodeDevices
// (two shards of a node make one), 1 with a valid Lease, 0 with an expired or missing one, and
// nothing for a node without NodeDevices although its agent has a Lease.
func TestAgentReadyMetric(t *testing.T) {
	scheme, err := contract.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	nd := func(name, node string) client.Object {
		return &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kdv1alpha1.NodeDeviceSpec{NodeName: node}}
	}
	lease := func(node string, renewed time.Time) client.Object {
		t := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kd", Name: AgentLeaseName(node)},
			Spec: coordinationv1.LeaseSpec{RenewTime: &t}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		nd("n1.a", "n1"), nd("n1.b", "n1"), nd("n2.a", "n2"), nd("n3.a", "n3"),
		lease("n1", testNow.Add(-10*time.Second)), lease("n2", testNow.Add(-time.Minute)), lease("n4", testNow),
	).Build()
	src := &agentReadySource{client: c, leases: leaseReader{client: c, namespace: "kd", duration: 40 * time.Second},
		clock: clocktesting.NewFakePassiveClock(testNow)}
	collector := &agentReady{sources: map[*agentReadySource]struct{}{src: {}}}
	want := `
# HELP kubedevice_node_agent_ready ` + agentReadyHelp + `
# TYPE kubedevice_node_agent_ready gauge
kubedevice_node_agent_ready{node="n1",reason="AgentLeaseValid"} 1
kubedevice_node_agent_ready{node="n2",reason="AgentLeaseExpired"} 0
kubedevice_node_agent_ready{node="n3",reason="AgentLeaseMissing"} 0
`
	if err := testutil.CollectAndCompare(collector, strings.NewReader(want), AgentReadyMetric); err != nil {
		t.Error(err)
	}
}
