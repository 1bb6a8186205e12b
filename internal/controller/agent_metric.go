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
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// AgentReadyMetric is 1 for each node with NodeDevices whose agent's Lease is valid and 0 for one
// whose Lease expired or is missing: the AgentReady condition of the node's NodeDevices, as an
// alert can read it. node is the label of the agents' device metrics (kubedevice_agent_device_info).
const AgentReadyMetric = "kubedevice_node_agent_ready"

const agentReadyHelp = "1 while the node agent's Lease is valid, 0 once it expired or is missing (the NodeDevices' AgentReady condition), " +
	"for each node with NodeDevices; reason is AgentLeaseValid, AgentLeaseExpired or AgentLeaseMissing."

var agentReadyDesc = prometheus.NewDesc(AgentReadyMetric, agentReadyHelp, []string{"node", "reason"}, nil)

// collectTimeout bounds the cache reads of one scrape.
const collectTimeout = 5 * time.Second

// agentReady collects AgentReadyMetric at each scrape from the caches of every running controller
// (one in the binary; tests may run several): the nodes are those of the NodeDevices, so a node
// whose NodeDevices are gone takes its series with it, and the Leases are judged as the NodeDevice
// reconciler judges them.
type agentReady struct {
	mu      sync.Mutex
	sources map[*agentReadySource]struct{}
}

// agentReadySource is one controller's cache and Lease judgement.
type agentReadySource struct {
	client client.Reader
	leases leaseReader
	clock  clock.PassiveClock
}

var agentReadyCollector = &agentReady{sources: map[*agentReadySource]struct{}{}}

func init() {
	metrics.Registry.MustRegister(agentReadyCollector)
}

// Describe sends the one descriptor.
func (*agentReady) Describe(ch chan<- *prometheus.Desc) { ch <- agentReadyDesc }

// Collect sends one series per node of every source; a source whose cache cannot be read sends
// none (the scrape's other series are still served).
func (a *agentReady) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	sources := make([]*agentReadySource, 0, len(a.sources))
	for s := range a.sources {
		sources = append(sources, s)
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	for _, src := range sources {
		src.collect(ctx, ch)
	}
}

func (s *agentReadySource) collect(ctx context.Context, ch chan<- prometheus.Metric) {
	var nds kdv1alpha1.NodeDeviceList
	if err := s.client.List(ctx, &nds, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	now := s.clock.Now()
	seen := map[string]bool{}
	for i := range nds.Items {
		node := nds.Items[i].Spec.NodeName
		if node == "" || seen[node] {
			continue
		}
		seen[node] = true
		state, err := s.leases.agentState(ctx, node, now)
		if err != nil {
			continue
		}
		value := 0.0
		if state.ready {
			value = 1
		}
		ch <- prometheus.MustNewConstMetric(agentReadyDesc, prometheus.GaugeValue, value, node, state.reason)
	}
}

// agentReadyRunnable adds its source to the collector while the manager runs. Every replica
// exports the series, the leader or not: their caches are all filled.
type agentReadyRunnable struct{ src *agentReadySource }

// NeedLeaderElection is false: a standby's cache is as good as the leader's.
func (agentReadyRunnable) NeedLeaderElection() bool { return false }

// Start adds the source until ctx ends.
func (r agentReadyRunnable) Start(ctx context.Context) error {
	agentReadyCollector.mu.Lock()
	agentReadyCollector.sources[r.src] = struct{}{}
	agentReadyCollector.mu.Unlock()
	<-ctx.Done()
	agentReadyCollector.mu.Lock()
	delete(agentReadyCollector.sources, r.src)
	agentReadyCollector.mu.Unlock()
	return nil
}
