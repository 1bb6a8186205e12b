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

package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// agentFieldOwner is the field manager the node agent writes with.
	agentFieldOwner = "kubedevice-agent"
	// fixtureWorkers is how many objects the fixture writes at once.
	fixtureWorkers = 32
)

// cluster is what the agents of the benchmarked cluster have written: Nodes, one NodeDevice per
// shard of gopher on each, and each agent's Lease.
type cluster struct {
	c client.Client
	p params

	mu sync.Mutex
	// nodeDevices lists every NodeDevice, shard-major: shard 0 of every node, then shard 1, ...
	nodeDevices []*kdv1alpha1.NodeDevice
	// unhealthy counts the unhealthy devices of each NodeDevice, by name.
	unhealthy map[string]int
	// published is true once a controller has published every node's capacity and it is known
	// to be in place.
	published bool
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

func nodeDeviceName(node string, shard int) string { return fmt.Sprintf("%s-gopher-%d", node, shard) }

// createCluster writes the Nodes, NodeDevices and Leases as the kubelet and the agents would.
func createCluster(ctx context.Context, c client.Client, p params) (*cluster, error) {
	cl := &cluster{c: c, p: p, unhealthy: map[string]int{}}
	for s := range p.shards {
		for i := range p.nodes {
			node := nodeName(i)
			nd := testutil.MakeNodeDevice(nodeDeviceName(node, s)).Node(node).Resource(string(gopher)).
				Shard(int32(s)).Devices(fmt.Sprintf("gopher-%d", s), p.devices).
				Plugin(kdv1alpha1.PluginStateRegistered).Obj()
			// As the agent writes a new shard: the controller's finalizer with the object, and the
			// AgentReady condition of a valid Lease with its first status (generation 1).
			nd.Finalizers = []string{contract.NodeCapacityFinalizer}
			ready := contract.AgentReadyCondition(agentNamespace, node, 1)
			ready.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
			nd.Status.Conditions = append(nd.Status.Conditions, ready)
			cl.nodeDevices = append(cl.nodeDevices, nd)
			cl.unhealthy[nd.Name] = 0
		}
	}
	now := time.Now()
	err := forEach(ctx, p.nodes, func(ctx context.Context, i int) error {
		node := testutil.MakeNode(nodeName(i)).Label(corev1.LabelHostname, nodeName(i)).Obj()
		if err := c.Create(ctx, node); err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		return renewLease(ctx, c, node.Name, now)
	})
	if err != nil {
		return nil, err
	}
	err = forEach(ctx, len(cl.nodeDevices), func(ctx context.Context, i int) error {
		return applyAsAgent(ctx, c, cl.nodeDevices[i])
	})
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// forEach calls fn for 0 … n-1, fixtureWorkers at a time, and returns the first error.
func forEach(ctx context.Context, n int, fn func(context.Context, int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(fixtureWorkers)
	for i := range n {
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}

// renewLease renews the agent Lease of node at t, as the agent does every 10 s.
func renewLease(ctx context.Context, c client.Client, node string, t time.Time) error {
	lease := testutil.MakeLease(kdcontroller.AgentLeaseName(node), agentNamespace).RenewTime(t).Obj()
	u, err := toApply(c, lease)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("renewing the Lease of node %s: %w", node, err)
	}
	return nil
}

// renewAll renews every agent's Lease now.
func (cl *cluster) renewAll(ctx context.Context) error {
	now := time.Now()
	return forEach(ctx, cl.p.nodes, func(ctx context.Context, i int) error {
		return renewLease(ctx, cl.c, nodeName(i), now)
	})
}

// applyAsAgent writes nd as the agent does: server-side apply of the object, then of its status,
// under the agent's field owner.
func applyAsAgent(ctx context.Context, c client.Client, nd *kdv1alpha1.NodeDevice) error {
	u, err := toApply(c, nd)
	if err != nil {
		return err
	}
	status := u.Object["status"]
	delete(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying NodeDevice %s: %w", nd.Name, err)
	}
	return applyStatusAsAgent(ctx, c, nd.Name, status)
}

func applyStatusAsAgent(ctx context.Context, c client.Client, name string, status any) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kdv1alpha1.GroupVersion.WithKind("NodeDevice"))
	u.SetName(name)
	u.Object["status"] = status
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the status of NodeDevice %s: %w", name, err)
	}
	return nil
}

// toApply converts obj to the body of an apply request.
func toApply(c client.Client, obj client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: m}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("finding the kind of %s: %w", obj.GetName(), err)
	}
	u.SetGroupVersionKind(gvk)
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// want returns the gopher count node should publish: its shards' allocatable devices.
func (cl *cluster) want(node string) int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var n int64
	for s := range cl.p.shards {
		n += int64(cl.p.devices - cl.unhealthy[nodeDeviceName(node, s)])
	}
	return n
}

// flip marks device 0 of nd unhealthy, or healthy again, as the agent reports a health change,
// and returns the count its node should then publish. Call it for one NodeDevice at a time.
func (cl *cluster) flip(ctx context.Context, nd *kdv1alpha1.NodeDevice) (int64, func() error) {
	cl.mu.Lock()
	health := kdv1alpha1.DeviceUnhealthy
	if cl.unhealthy[nd.Name] > 0 {
		health = kdv1alpha1.DeviceHealthy
	}
	nd.Status.Devices[0].Health = health
	nd.Status.Allocatable, nd.Status.Unhealthy = int32(cl.p.devices), 0
	if health == kdv1alpha1.DeviceUnhealthy {
		nd.Status.Allocatable, nd.Status.Unhealthy = int32(cl.p.devices-1), 1
		cl.unhealthy[nd.Name] = 1
	} else {
		cl.unhealthy[nd.Name] = 0
	}
	body := nd.Status.DeepCopy()
	cl.mu.Unlock()
	return cl.want(nd.Spec.NodeName), func() error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(body)
		if err != nil {
			return fmt.Errorf("converting the status of %s: %w", nd.Name, err)
		}
		return applyStatusAsAgent(ctx, cl.c, nd.Name, m)
	}
}

// unpublish takes back everything a controller wrote (a finalizer or AgentReady condition it applied,
// and the node capacity), as on a cluster where the controller was never installed: the agents'
// own finalizer and AgentReady condition stay.
func (cl *cluster) unpublish(ctx context.Context) error {
	err := forEach(ctx, len(cl.nodeDevices), func(ctx context.Context, i int) error {
		nd := cl.nodeDevices[i]
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(kdv1alpha1.GroupVersion.WithKind("NodeDevice"))
		u.SetName(nd.Name)
		// Applying nothing under the controller's field owner drops what it owns.
		if err := cl.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner(kdcontroller.FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("removing the finalizer of %s: %w", nd.Name, err)
		}
		if err := cl.c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(kdcontroller.FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("removing the conditions of %s: %w", nd.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]any{string(gopher): nil},
		"allocatable": map[string]any{string(gopher): nil},
	}})
	if err != nil {
		return fmt.Errorf("encoding the node patch: %w", err)
	}
	err = forEach(ctx, cl.p.nodes, func(ctx context.Context, i int) error {
		node := &corev1.Node{}
		node.Name = nodeName(i)
		if err := cl.c.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("removing the capacity of node %s: %w", node.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	cl.mu.Lock()
	cl.published = false
	cl.mu.Unlock()
	return nil
}

// changeOrder returns the NodeDevices in the order the churn benchmark changes them: every node
// once before any node twice, so a node's changes are far apart.
func (cl *cluster) changeOrder(seed uint64) []*kdv1alpha1.NodeDevice {
	r := rand.New(rand.NewPCG(seed, seed))
	perm := r.Perm(cl.p.nodes)
	out := make([]*kdv1alpha1.NodeDevice, 0, len(cl.nodeDevices))
	for s := range cl.p.shards {
		for _, i := range perm {
			out = append(out, cl.nodeDevices[s*cl.p.nodes+i])
		}
	}
	return out
}
