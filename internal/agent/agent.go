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
	"errors"
	"fmt"
	"net/http"

	ctrl "sigs.k8s.io/controller-runtime"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"

	"github.com/kubedevice/kubedevice/internal/agent/allocation"
	"github.com/kubedevice/kubedevice/internal/agent/injection"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/agent/mirror"
	"github.com/kubedevice/kubedevice/internal/agent/observe"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
)

// errNotReady is the readiness check's answer until the checkpoint is restored and the device
// manager serves plugins.
var errNotReady = errors.New("the device manager has not started yet")

// Agent runs the device manager core for one node and mirrors it into the cluster. Setup creates
// it; the manager runs it.
type Agent struct {
	// check is the readiness check past the gate: the core's, or the observer's.
	check func() error
	gate  *kube.Gate
}

// Setup adds the agent to mgr: the start-up runnable that restores the core's checkpoint and
// starts it, runtime injection (the NRI plugin with RuntimeInjectionNRI, and the controller that
// calls PreStartContainer ahead of container starts), the PodResources API server (unless its
// socket path is empty), the pod controller that allocates and frees devices and mirrors
// DeviceAllocations, the NodeDevice mirror, the DRA flow for opts.DRAResources or else the removal
// of the node's old ResourceSlices (with opts.DRANodeSelector, whichever the start-up chooses from
// the Node's labels), and the Lease. The manager's cache must be built with
// CacheOptions(opts.NodeName), and the field indexes of package indexer registered on it
// (indexer.Setup). The agent starts and stops dm; it must not have been started. In observe mode
// (ModeObserve) the agent is set up by setupObserve instead and dm is not used (it may be nil).
func Setup(mgr ctrl.Manager, dm *nodeagent.Manager, opts Options) (*Agent, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, fmt.Errorf("setting up the agent: %w", err)
	}
	gate := kube.NewGate()
	if opts.Mode == ModeObserve {
		return setupObserve(mgr, gate, opts)
	}
	exportRuntimeInjection(opts.RuntimeInjection)
	recorder := mgr.GetEventRecorder(FieldOwner)

	injectionOpts := injection.Options{NodeName: opts.NodeName, Core: dm, Gate: gate, Recorder: recorder}
	if opts.RuntimeInjection == RuntimeInjectionNRI {
		injectionOpts.NRI = &opts.NRI
	}
	inj, err := injection.Setup(mgr, injectionOpts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(&startup{
		opts: opts, core: dm, gate: gate, injection: inj, recorder: recorder,
		client: mgr.GetClient(), apiReader: mgr.GetAPIReader(),
		pods: kube.Pods{Client: mgr.GetClient(), NodeName: opts.NodeName},
	}); err != nil {
		return nil, fmt.Errorf("adding the agent's start-up: %w", err)
	}
	if err := setupPodResources(mgr, dm, gate, opts); err != nil {
		return nil, err
	}
	if err := allocation.Setup(mgr, allocation.Options{
		NodeName: opts.NodeName, Core: dm, Injection: inj, PreStart: inj, Gate: gate, Recorder: recorder, Clock: opts.Clock,
	}); err != nil {
		return nil, fmt.Errorf("setting up the pod controller: %w", err)
	}
	if err := mirror.Setup(mgr, mirror.Options{
		NodeName: opts.NodeName, WriteInterval: opts.WriteInterval, WriteSettle: opts.WriteSettle,
		Core: dm, Cordons: dm, Injection: inj, Gate: gate, Clock: opts.Clock, Path: kdv1alpha1.DevicePathNodeCapacity,
		LeaseNamespace: opts.Namespace, Recorder: recorder,
	}); err != nil {
		return nil, fmt.Errorf("setting up the NodeDevice mirror: %w", err)
	}
	if err := setupDRA(mgr, dm, gate, opts); err != nil {
		return nil, err
	}
	if err := mgr.Add(&leaseRenewer{opts: opts, gate: gate, client: mgr.GetClient(), apiReader: mgr.GetAPIReader()}); err != nil {
		return nil, fmt.Errorf("adding the agent's Lease: %w", err)
	}
	return &Agent{check: dm.Check, gate: gate}, nil
}

// setupObserve adds the agent of observe mode to mgr: the observer of the kubelet and its
// DeviceAllocations (package observe), the NodeDevice mirror reading the observer (status.path
// Observed; no cordons, no runtime injection), and the Lease. Nothing is registered, allocated,
// injected or served on the node.
func setupObserve(mgr ctrl.Manager, gate *kube.Gate, opts Options) (*Agent, error) {
	obsOpts := opts.Observe
	obsOpts.NodeName, obsOpts.Gate, obsOpts.Clock = opts.NodeName, gate, opts.Clock
	obs, err := observe.Setup(mgr, obsOpts)
	if err != nil {
		return nil, err
	}
	if err := mirror.Setup(mgr, mirror.Options{
		NodeName: opts.NodeName, WriteInterval: opts.WriteInterval, WriteSettle: opts.WriteSettle,
		Core: obs, Gate: gate, Clock: opts.Clock, Path: kdv1alpha1.DevicePathObserved, LeaseNamespace: opts.Namespace,
	}); err != nil {
		return nil, fmt.Errorf("setting up the NodeDevice mirror: %w", err)
	}
	if err := mgr.Add(&leaseRenewer{opts: opts, gate: gate, client: mgr.GetClient(), apiReader: mgr.GetAPIReader()}); err != nil {
		return nil, fmt.Errorf("adding the agent's Lease: %w", err)
	}
	return &Agent{check: obs.Check, gate: gate}, nil
}

// ReadyCheck is a readiness check (healthz.Checker): ready once the device manager has started
// and while plugins can register.
func (a *Agent) ReadyCheck(*http.Request) error {
	if !a.gate.IsOpen() {
		return errNotReady
	}
	return a.check()
}

// setupPodResources adds the PodResources API server to mgr unless its socket path is empty. It
// serves once the agent is ready: the checkpoint restored, the devices of pods that ended while
// the agent was away freed, the core started and the pod cache synced, so the first answer is
// already complete.
func setupPodResources(mgr ctrl.Manager, dm *nodeagent.Manager, gate *kube.Gate, opts Options) error {
	if opts.PodResources.SocketPath == "" {
		return nil
	}
	pods := kube.Pods{Client: mgr.GetClient(), NodeName: opts.NodeName}
	s, err := podresources.New(podsProvider{pods}, dm, opts.PodResources)
	if err != nil {
		return fmt.Errorf("creating the PodResources API server: %w", err)
	}
	if err := mgr.Add(podResourcesRunner{server: s, gate: gate}); err != nil {
		return fmt.Errorf("adding the PodResources API server: %w", err)
	}
	return nil
}
