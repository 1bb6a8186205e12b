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

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
)

// podResourcesRunner serves the PodResources API once the agent is ready.
type podResourcesRunner struct {
	server *podresources.Server
	gate   *kube.Gate
}

// NeedLeaderElection is false: every node's agent runs.
func (podResourcesRunner) NeedLeaderElection() bool { return false }

// Start serves the API until ctx ends, then stops serving and removes the socket. Failing to
// serve (the socket's directory cannot be created, or something else than a socket is at the
// path) stops the agent, as it stops the kubelet.
func (r podResourcesRunner) Start(ctx context.Context) error {
	if r.gate.Wait(ctx) != nil {
		return nil
	}
	if err := r.server.Start(ctx); err != nil {
		return fmt.Errorf("starting the PodResources API server: %w", err)
	}
	<-ctx.Done()
	r.server.Stop()
	return nil
}

var _ manager.LeaderElectionRunnable = podResourcesRunner{}

// podsProvider answers the PodResources API's questions about pods from the informer cache,
// which holds the node's pods only.
type podsProvider struct{ pods kube.Pods }

// ActivePods returns the node's pods that are not terminal.
func (p podsProvider) ActivePods(ctx context.Context) ([]*corev1.Pod, error) {
	return p.pods.Active(ctx)
}

// Pod returns the cached pod namespace/name if it is bound to the node.
func (p podsProvider) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if namespace == "" || name == "" {
		return nil, nil
	}
	return p.pods.Get(ctx, namespace, name)
}
