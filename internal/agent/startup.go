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
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/allocation"
	"github.com/kubedevice/kubedevice/internal/agent/injection"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/agent/mirror"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
)

// startupTimeout bounds the start-up's API calls (reading the Node for --dra-node-selector,
// listing the node's DeviceAllocations, NodeDevices and pods) and checkpoint work.
const startupTimeout = 2 * time.Minute

// Core is the device manager core as the agent wires it: what start-up and the readiness check
// use of it. Each flow declares its own part (allocation.Core, mirror.Core, injection.Core), and
// the PodResources API its own (podresources.DevicesProvider); *nodeagent.Manager is all of them.
type Core interface {
	// RestoreCheckpoint loads the checkpoint; it is called once, before Start.
	RestoreCheckpoint(ctx context.Context) (nodeagent.RestoreResult, error)
	// RestoreAllocations rebuilds the allocations when the checkpoint was corrupt.
	RestoreAllocations(allocs []nodeagent.PodAllocation) error
	// SetCordons takes the administrators' cordons of resource.
	SetCordons(resource string, ids []string)
	// UpdateAllocatedDevices frees the devices of every pod not in activePods.
	UpdateAllocatedDevices(ctx context.Context, activePods []*corev1.Pod) error
	Start(ctx context.Context) error
	Stop()
	// Check is nil while plugins can register.
	Check() error
}

var _ Core = (*nodeagent.Manager)(nil)

// startup restores the core's state, starts it and opens the gate every flow waits on; it stops
// the core when the manager stops.
type startup struct {
	opts      Options
	core      Core
	gate      *kube.Gate
	injection *injection.Injection
	recorder  recorder.EventRecorder
	client    client.Client
	apiReader client.Reader
	pods      kube.Pods
}

// NeedLeaderElection is false: every node's agent runs.
func (*startup) NeedLeaderElection() bool { return false }

// Start restores the checkpoint (rebuilding it from this node's DeviceAllocations when it is
// corrupt), hands the administrators' cordons to the core, frees the devices of pods that ended
// while the agent was away, starts the core, and opens the gate. Listing from the cache waits for
// its informers to sync, so the view of pods it frees against is complete.
func (s *startup) Start(ctx context.Context) error {
	logger := ctrl.LoggerFrom(ctx).WithName("startup")
	ctx = ctrl.LoggerInto(ctx, logger)
	if err := s.restore(ctx); err != nil {
		return err
	}
	if err := s.core.Start(ctx); err != nil {
		return fmt.Errorf("starting the device manager: %w", err)
	}
	s.gate.Open(s.opts.Clock.Now())
	logger.Info("Agent ready", "node", s.opts.NodeName)

	<-ctx.Done()
	s.core.Stop()
	return nil
}

// restore brings the core's state back before it starts, within startupTimeout; first, with
// --dra-node-selector, it chooses whether the node serves --dra-resources through DRA, which the
// core then follows (Options.ServedByDRA).
func (s *startup) restore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if p := s.opts.draPath; p != nil {
		if err := chooseDRAPath(ctx, s.client, s.opts.Clock, s.opts.NodeName, p); err != nil {
			return err
		}
	}
	res, err := s.core.RestoreCheckpoint(ctx)
	corrupt, isCorrupt := corruptCheckpoint(err)
	switch {
	case isCorrupt:
		if err := s.rebuild(ctx, err, corrupt); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("restoring the device manager checkpoint: %w", err)
	default:
		ctrl.LoggerFrom(ctx).Info("Restored the device manager checkpoint", "rebooted", res.Rebooted, "allocations", res.Allocations, "bootID", res.BootID)
	}
	if err := s.restoreNodeDevices(ctx); err != nil {
		return err
	}
	return s.freeEnded(ctx)
}

// corruptCheckpoint returns why the core found its checkpoint corrupt (and quarantined it):
// ok is false when err is not that.
func corruptCheckpoint(err error) (corrupt *checkpoint.CorruptError, ok bool) {
	return corrupt, errors.As(err, &corrupt)
}

// rebuild restores the allocations from this node's DeviceAllocations after the checkpoint was
// found corrupt (and quarantined, and counted, by the core), and reports it: a Warning event on
// the Node and kubedevice_agent_checkpoint_rebuilds_total. Allocations the core could not restore
// are reported, not fatal: the others are restored. Failing to list the DeviceAllocations is
// fatal.
func (s *startup) rebuild(ctx context.Context, restoreErr error, corrupt *checkpoint.CorruptError) error {
	logger := ctrl.LoggerFrom(ctx)
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := s.apiReader.List(ctx, list, client.MatchingFields{indexer.DeviceAllocationNodeName: s.opts.NodeName}); err != nil {
		return fmt.Errorf("listing the DeviceAllocations of node %q to rebuild the corrupt checkpoint: %w", s.opts.NodeName, err)
	}
	allocs := allocation.PodAllocationsOf(list.Items)
	result, note := "Rebuilt", fmt.Sprintf("%v; rebuilt the allocations of %d pods from this node's DeviceAllocations", restoreErr, len(allocs))
	if err := s.core.RestoreAllocations(allocs); err != nil {
		result, note = "Partial", fmt.Sprintf("%s, with errors: %v", note, err)
		logger.Error(err, "Rebuilding the corrupt checkpoint from the DeviceAllocations")
	}
	checkpointRebuilds.WithLabelValues(result).Inc()
	logger.Info("Rebuilt the corrupt checkpoint from the DeviceAllocations", "pods", len(allocs), "result", result,
		"reason", corrupt.Reason, "quarantinedPath", corrupt.QuarantinedPath)

	node := &corev1.Node{}
	if err := s.client.Get(ctx, client.ObjectKey{Name: s.opts.NodeName}, node); err != nil {
		// The event still names the node; only its UID is missing.
		logger.Error(err, "Reporting the corrupt checkpoint without the Node's UID")
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.opts.NodeName}}
	}
	s.recorder.Eventf(node, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonCheckpointCorrupt, "RestoreCheckpoint", "%s", kube.Truncate(note, 1024))
	return nil
}

// restoreNodeDevices hands what the node's NodeDevices say to the node before anything is
// allocated: their cordons to the core, and to runtime injection which resources' plugins
// required PreStartContainer. The NodeDevice mirror keeps both current afterwards.
func (s *startup) restoreNodeDevices(ctx context.Context) error {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := s.client.List(ctx, list); err != nil {
		return fmt.Errorf("listing the NodeDevices of node %q: %w", s.opts.NodeName, err)
	}
	byResource := map[string][]kdv1alpha1.NodeDevice{}
	for _, nd := range list.Items {
		if nd.Spec.NodeName == s.opts.NodeName {
			byResource[nd.Spec.ResourceName] = append(byResource[nd.Spec.ResourceName], nd)
		}
	}
	for resource, objs := range byResource {
		if ids := mirror.CordonedIDs(objs); len(ids) > 0 {
			s.core.SetCordons(resource, ids)
		}
		if slices.ContainsFunc(objs, func(nd kdv1alpha1.NodeDevice) bool {
			return nd.Status.Plugin != nil && nd.Status.Plugin.PreStartRequired
		}) {
			s.injection.RestorePreStartRequired(resource)
		}
	}
	return nil
}

// freeEnded frees the devices of the pods that ended or disappeared while the agent was away.
func (s *startup) freeEnded(ctx context.Context) error {
	active, err := s.pods.Active(ctx)
	if err != nil {
		return err
	}
	if err := s.core.UpdateAllocatedDevices(ctx, active); err != nil {
		return fmt.Errorf("freeing the devices of ended pods: %w", err)
	}
	return nil
}
