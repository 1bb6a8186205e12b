package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
)

// setupPodResources adds the PodResources API server to mgr unless its socket path is empty.
func (a *Agent) setupPodResources(mgr ctrl.Manager) error {
	if a.opts.PodResources.SocketPath == "" {
		return nil
	}
	s, err := podresources.New(podsProvider{a}, a.dm, a.opts.PodResources)
	if err != nil {
		return fmt.Errorf("creating the PodResources API server: %w", err)
	}
	a.podResources = s
	if err := mgr.Add(podResourcesRunner{a}); err != nil {
		return fmt.Errorf("adding the PodResources API server: %w", err)
	}
	return nil
}

// podResourcesRunner serves the PodResources API once the agent is ready: the checkpoint
// restored, the devices of pods that ended while the agent was away freed, the core started and
// the pod cache synced, so the first answer is already complete.
type podResourcesRunner struct{ *Agent }

// NeedLeaderElection is false: every node's agent runs.
func (podResourcesRunner) NeedLeaderElection() bool { return false }

// Start serves the API until ctx ends, then stops serving and removes the socket. Failing to
// serve (the socket's directory cannot be created, or something else than a socket is at the
// path) stops the agent, as it stops the kubelet.
func (r podResourcesRunner) Start(ctx context.Context) error {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil
	}
	if err := r.podResources.Start(ctx); err != nil {
		return fmt.Errorf("starting the PodResources API server: %w", err)
	}
	<-ctx.Done()
	r.podResources.Stop()
	return nil
}

var _ manager.LeaderElectionRunnable = podResourcesRunner{}

// podsProvider answers the PodResources API's questions about pods from the informer cache,
// which holds the node's pods only.
type podsProvider struct{ *Agent }

// ActivePods returns the node's pods that are not terminal.
func (p podsProvider) ActivePods(ctx context.Context) ([]*corev1.Pod, error) {
	return p.activePods(ctx)
}

// Pod returns the cached pod namespace/name if it is bound to the node.
func (p podsProvider) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if namespace == "" || name == "" {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting pod %s/%s from the cache: %w", namespace, name, err)
	}
	if pod.Spec.NodeName != p.opts.NodeName {
		return nil, nil
	}
	return pod, nil
}
