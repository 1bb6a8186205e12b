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

package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// The delays between two reads of the agent's Node while it cannot be read at start-up (as the
// NRI plugin's reconnections): doubling from the first to the last, within startupTimeout.
const (
	nodeReadInitialDelay = 250 * time.Millisecond
	nodeReadMaxDelay     = 5 * time.Second
)

// draPath is whether this node serves the agent's --dra-resources through DRA, when
// --dra-node-selector makes that a per-node choice: decided once, by the start-up, from the
// Node's labels as they are when the agent starts (chooseDRAPath). The core asks servedByDRA; the
// DRA flow or the removal of the node's old slices starts once it is decided (draPathRunner).
type draPath struct {
	resources dra.Resources
	selector  labels.Selector

	decided chan struct{}
	// served is the choice, written once before decided is closed.
	served bool
}

func newDRAPath(resources dra.Resources, selector labels.Selector) *draPath {
	return &draPath{resources: resources, selector: selector, decided: make(chan struct{})}
}

// servedByDRA is the core's Config.ServedByDRA: resources.Match once the node has been chosen
// for DRA; false before (nothing asks the core before the start-up gate opens, which is after
// the choice) and on a node that was not chosen.
func (p *draPath) servedByDRA(resource string) bool {
	served, ok := p.choice()
	return ok && served && p.resources.Match(resource)
}

// decide records the choice; it must be called once.
func (p *draPath) decide(served bool) {
	p.served = served
	close(p.decided)
}

// choice returns the choice, and false while it is not made.
func (p *draPath) choice() (served, ok bool) {
	select {
	case <-p.decided:
		return p.served, true
	default:
		return false, false
	}
}

// wait returns the choice once it is made, or ctx's error if ctx ends first.
func (p *draPath) wait(ctx context.Context) (bool, error) {
	select {
	case <-p.decided:
		return p.served, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// chooseDRAPath reads the Node named node through reader (the agent's cache) and decides p from
// its labels, logging the choice with the selector and the labels of the node it looked at. A
// Node that cannot be read (not created yet, the cache not synced) is read again after a delay
// that doubles from nodeReadInitialDelay to nodeReadMaxDelay, until ctx ends: then p stays
// undecided and the error says why.
func chooseDRAPath(ctx context.Context, reader client.Reader, clk clock.WithTicker, node string, p *draPath) error {
	n, err := readNode(ctx, reader, clk, node)
	if err != nil {
		return fmt.Errorf("reading Node %q to match its labels against --dra-node-selector=%q: %w", node, p.selector.String(), err)
	}
	served := p.selector.Matches(labels.Set(n.Labels))
	p.decide(served)
	logger := ctrl.LoggerFrom(ctx).WithValues("draNodeSelector", p.selector.String(), "nodeLabels", selectedLabels(p.selector, n.Labels),
		"draResources", p.resources.String())
	if served {
		logger.Info("Serving the DRA resources through DRA: the node's labels match --dra-node-selector")
	} else {
		logger.Info("Serving every resource through node capacity, as without --dra-resources: the node's labels do not match --dra-node-selector")
	}
	return nil
}

// readNode gets the Node named node, trying again with backoff until it succeeds or ctx ends.
func readNode(ctx context.Context, reader client.Reader, clk clock.WithTicker, node string) (*corev1.Node, error) {
	logger := ctrl.LoggerFrom(ctx)
	delay := nodeReadInitialDelay
	for {
		n := &corev1.Node{}
		err := reader.Get(ctx, client.ObjectKey{Name: node}, n)
		if err == nil {
			return n, nil
		}
		logger.Error(err, "Reading the agent's Node to match its labels against --dra-node-selector; trying again", "node", node, "retryIn", delay)
		t := clk.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C():
		}
		delay = min(2*delay, nodeReadMaxDelay)
	}
}

// selectedLabels returns the labels of set whose keys sel names: what the choice looked at.
func selectedLabels(sel labels.Selector, set map[string]string) map[string]string {
	reqs, _ := sel.Requirements()
	out := map[string]string{}
	for _, r := range reqs {
		if v, ok := set[r.Key()]; ok {
			out[r.Key()] = v
		}
	}
	return out
}

// draPathRunner starts, once the start-up has chosen the node's path, the DRA flow on a node
// chosen for DRA, and otherwise the removal of the node's old ResourceSlices, as an agent without
// --dra-resources does.
type draPathRunner struct {
	path       *draPath
	dra        manager.Runnable
	withdrawal manager.Runnable
}

// NeedLeaderElection is false: every node's agent runs its own.
func (*draPathRunner) NeedLeaderElection() bool { return false }

func (r *draPathRunner) Start(ctx context.Context) error {
	served, err := r.path.wait(ctx)
	if err != nil {
		return nil // The manager stopped before the start-up chose.
	}
	if served {
		return r.dra.Start(ctx)
	}
	return r.withdrawal.Start(ctx)
}

// setupDRA adds to mgr what the agent runs of DRA: the DRA flow when it serves resources through
// DRA on every node; the removal of the node's old ResourceSlices when it serves none; and with
// a node selector, either, as the start-up chooses (draPathRunner).
func setupDRA(mgr ctrl.Manager, dm *nodeagent.Manager, gate *kube.Gate, opts Options) error {
	if !opts.DRAResources.Any() {
		if err := dra.SetupWithdrawal(mgr, opts.NodeName, gate); err != nil {
			return fmt.Errorf("setting up the removal of old ResourceSlices: %w", err)
		}
		return nil
	}
	d := opts.DRA
	d.NodeName, d.Core, d.Gate = opts.NodeName, dm, gate
	if opts.DRANodeSelector == nil {
		if err := dra.Setup(mgr, d); err != nil {
			return fmt.Errorf("setting up the DRA kubelet plugin: %w", err)
		}
		return nil
	}
	if opts.draPath == nil {
		return fmt.Errorf("%w: a node selector is set but the core does not follow its choice (Config.ServedByDRA must be Options.ServedByDRA())", errDRA)
	}
	flow, err := dra.New(mgr, d)
	if err != nil {
		return fmt.Errorf("setting up the DRA kubelet plugin: %w", err)
	}
	r := &draPathRunner{path: opts.draPath, dra: flow, withdrawal: dra.NewWithdrawal(mgr, opts.NodeName, gate)}
	if err := mgr.Add(r); err != nil {
		return fmt.Errorf("adding the DRA path chosen at start-up: %w", err)
	}
	return nil
}
