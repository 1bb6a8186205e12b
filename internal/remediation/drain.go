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

package remediation

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/drain"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// DefaultEvictRetryDelay is how long Drain waits before asking again for an eviction a
// PodDisruptionBudget refused (429), as kubectl drain does.
const DefaultEvictRetryDelay = 5 * time.Second

// DrainOptions configure Drain and Uncordon.
type DrainOptions struct {
	Target
	// Reason goes into each new cordon.
	Reason string
	// DryRun: DryRunClient writes nothing and prints what would be done; DryRunServer sends
	// every write with dryRun=All.
	DryRun cmdutil.DryRunStrategy
	// Timeout bounds the evictions, 429s retried included; zero waits forever (kubectl drain's
	// default).
	Timeout time.Duration
	// RetryDelay is the wait after a refused eviction; zero means DefaultEvictRetryDelay.
	RetryDelay time.Duration
	// Out gets the progress, ErrOut the refusals being retried.
	Out, ErrOut io.Writer
}

// Drain cordons the devices of opts.Target and evicts the pods holding them, waiting for each to
// be gone. It fails on a device the resource does not have on the node, and when the evictions do
// not finish within opts.Timeout; the cordons stay then (Uncordon removes them).
func Drain(ctx context.Context, c client.Client, cs kubernetes.Interface, opts DrainOptions) error {
	shards, err := shardsOf(ctx, c, opts.Target)
	if err != nil {
		return err
	}
	if err := checkDevices(shards, opts.Target, true); err != nil {
		return err
	}
	if err := cordon(ctx, c, shards, opts.Target, opts.Reason, opts.DryRun, opts.Out); err != nil {
		return err
	}
	holders, err := holdersOf(ctx, c, shards, opts.Target)
	if err != nil {
		return err
	}
	pods, err := livePods(ctx, cs, holders, opts.Out)
	if err != nil {
		return err
	}
	if opts.DryRun == cmdutil.DryRunClient {
		for _, p := range pods {
			fmt.Fprintf(opts.Out, "evicting pod %s/%s (dry run)\n", p.Namespace, p.Name)
		}
	} else if err := evict(ctx, cs, pods, opts); err != nil {
		return fmt.Errorf("%w\nthe devices stay cordoned: kubedevice uncordon %s %s %s puts them back in service",
			err, opts.Node, opts.Resource, strings.Join(opts.Devices, " "))
	}
	fmt.Fprintf(opts.Out, "%s drained%s\n", opts.Target, dryRunSuffix(opts.DryRun))
	return nil
}

// Uncordon removes the cordons of the devices of opts.Target from every NodeDevice shard.
func Uncordon(ctx context.Context, c client.Client, opts DrainOptions) error {
	shards, err := shardsOf(ctx, c, opts.Target)
	if err != nil {
		return err
	}
	if err := checkDevices(shards, opts.Target, false); err != nil {
		return err
	}
	return uncordon(ctx, c, shards, opts.Target, opts.DryRun, opts.Out)
}

// holdersOf returns the pods holding the target's devices: those whose DeviceAllocations on the
// node list them, and, for a device prepared for a DRA ResourceClaim, the pods the claim is
// reserved for (a pod sharing the claim, or one whose DeviceAllocation is not written yet).
func holdersOf(ctx context.Context, c client.Reader, shards []kdv1alpha1.NodeDevice, t Target) ([]Holder, error) {
	das := &kdv1alpha1.DeviceAllocationList{}
	if err := c.List(ctx, das, client.MatchingFields{"spec.nodeName": t.Node}); err != nil {
		return nil, fmt.Errorf("listing the DeviceAllocations of node %s: %w", t.Node, err)
	}
	holders := HoldersIn(das.Items, t.Node, t.Resource, t.Devices)
	for i := range shards {
		for _, d := range shards[i].Status.Devices {
			if d.Holder == nil || d.Holder.ClaimName == "" || !slices.Contains(t.Devices, d.ID) {
				continue
			}
			claimed, err := claimHolders(ctx, c, d.Holder.Namespace, d.Holder.ClaimName, d.ID)
			if err != nil {
				return nil, err
			}
			for _, h := range claimed {
				holders = addHolder(holders, h)
			}
		}
	}
	return holders, nil
}

// claimHolders returns the pods the ResourceClaim namespace/name is reserved for, as holders of id.
func claimHolders(ctx context.Context, c client.Reader, namespace, name, id string) ([]Holder, error) {
	claim := &resourcev1.ResourceClaim{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, claim)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ResourceClaim %s/%s: %w", namespace, name, err)
	}
	var out []Holder
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup == "" && ref.Resource == "pods" {
			out = append(out, Holder{Namespace: namespace, Name: ref.Name, UID: ref.UID, Devices: []string{id}})
		}
	}
	return out, nil
}

// livePods reads the holders' pods, leaving out those gone or replaced by a pod of the same name.
func livePods(ctx context.Context, cs kubernetes.Interface, holders []Holder, out io.Writer) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	for _, h := range holders {
		pod, err := cs.CoreV1().Pods(h.Namespace).Get(ctx, h.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && h.UID != "" && pod.UID != h.UID) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading pod %s: %w", h.Key(), err)
		}
		fmt.Fprintf(out, "pod %s holds %s\n", h.Key(), strings.Join(h.Devices, ","))
		pods = append(pods, *pod)
	}
	return pods, nil
}

// evict evicts pods through the Eviction API with kubectl drain's helper: a refusal (429: a
// PodDisruptionBudget) is retried every RetryDelay until the timeout, and each evicted pod is
// awaited until it is gone.
func evict(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod, opts DrainOptions) error {
	retryDelay := opts.RetryDelay
	if retryDelay == 0 {
		retryDelay = DefaultEvictRetryDelay
	}
	h := &drain.Helper{
		Ctx:                  ctx,
		Client:               cs,
		GracePeriodSeconds:   -1, // the pod's own terminationGracePeriodSeconds
		Timeout:              opts.Timeout,
		EvictErrorRetryDelay: retryDelay,
		DryRunStrategy:       opts.DryRun,
		Out:                  opts.Out,
		ErrOut:               opts.ErrOut,
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			if err == nil {
				fmt.Fprintf(opts.Out, "pod/%s evicted\n", pod.Name)
			}
		},
	}
	return h.DeleteOrEvictPods(pods)
}
