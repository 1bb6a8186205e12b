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
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/client-go/util/retry"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

var (
	errNoNodeDevice = errors.New("no NodeDevice lists the resource on the node")
	errUnknown      = errors.New("not a device of the resource on the node")
	errObserved     = errors.New("the kubelet manages the resource's device plugin on the node (status.path Observed): nothing on the node could keep a cordoned device from being allocated")
)

// Target names the devices of one resource on one node.
type Target struct {
	Node, Resource string
	// Devices are device IDs as the plugin reports them.
	Devices []string
}

func (t Target) String() string {
	return fmt.Sprintf("%s %s on node %s", t.Resource, strings.Join(t.Devices, ","), t.Node)
}

// shardsOf returns the NodeDevices of the target's node and resource, sorted by name.
func shardsOf(ctx context.Context, c client.Reader, t Target) ([]kdv1alpha1.NodeDevice, error) {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := c.List(ctx, list, client.MatchingFields{"spec.nodeName": t.Node, "spec.resourceName": t.Resource}); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of %s on node %s: %w", t.Resource, t.Node, err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("%s on node %s: %w", t.Resource, t.Node, errNoNodeDevice)
	}
	slices.SortFunc(list.Items, func(a, b kdv1alpha1.NodeDevice) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// shardListing returns the index of the shard whose status lists id, or -1.
func shardListing(shards []kdv1alpha1.NodeDevice, id string) int {
	return slices.IndexFunc(shards, func(nd kdv1alpha1.NodeDevice) bool {
		return slices.ContainsFunc(nd.Status.Devices, func(d kdv1alpha1.DeviceStatus) bool { return d.ID == id })
	})
}

// shardCordoning returns the indexes of the shards whose spec.cordons name id.
func shardCordoning(shards []kdv1alpha1.NodeDevice, id string) []int {
	var out []int
	for i := range shards {
		if slices.ContainsFunc(shards[i].Spec.Cordons, func(c kdv1alpha1.DeviceCordon) bool { return c.DeviceID == id }) {
			out = append(out, i)
		}
	}
	return out
}

// checkDevices fails unless every device of t is listed or cordoned by one of the shards, and
// (for a cordon) the resource is not Observed.
func checkDevices(shards []kdv1alpha1.NodeDevice, t Target, cordoning bool) error {
	for _, id := range t.Devices {
		if shardListing(shards, id) < 0 && len(shardCordoning(shards, id)) == 0 {
			return fmt.Errorf("%s: %q: %w (devices: %s)", t.Resource, id, errUnknown, strings.Join(deviceIDs(shards), ", "))
		}
	}
	if cordoning && slices.ContainsFunc(shards, func(nd kdv1alpha1.NodeDevice) bool {
		return nd.Status.Path == kdv1alpha1.DevicePathObserved
	}) {
		return fmt.Errorf("cannot cordon %s: %w", t, errObserved)
	}
	return nil
}

func deviceIDs(shards []kdv1alpha1.NodeDevice) []string {
	var ids []string
	for i := range shards {
		for _, d := range shards[i].Status.Devices {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// cordon adds a cordon for each device of t that no shard cordons yet, to the shard listing it,
// and says so on out.
func cordon(ctx context.Context, c client.Client, shards []kdv1alpha1.NodeDevice, t Target, reason string, dryRun cmdutil.DryRunStrategy, out io.Writer) error {
	for _, id := range t.Devices {
		if len(shardCordoning(shards, id)) > 0 {
			fmt.Fprintf(out, "%s %s already cordoned\n", t.Resource, id)
			continue
		}
		i := max(shardListing(shards, id), 0)
		add := func(nd *kdv1alpha1.NodeDevice) {
			nd.Spec.Cordons = append(nd.Spec.Cordons, kdv1alpha1.DeviceCordon{DeviceID: id, Reason: reason})
		}
		if err := patchShard(ctx, c, &shards[i], add, dryRun); err != nil {
			return fmt.Errorf("cordoning %s %s: %w", t.Resource, id, err)
		}
		fmt.Fprintf(out, "nodedevice/%s cordoned %s%s\n", shards[i].Name, id, dryRunSuffix(dryRun))
	}
	return nil
}

// uncordon removes the cordons of the devices of t from every shard, and says so on out.
func uncordon(ctx context.Context, c client.Client, shards []kdv1alpha1.NodeDevice, t Target, dryRun cmdutil.DryRunStrategy, out io.Writer) error {
	for _, id := range t.Devices {
		cordoning := shardCordoning(shards, id)
		if len(cordoning) == 0 {
			fmt.Fprintf(out, "%s %s already uncordoned\n", t.Resource, id)
			continue
		}
		drop := func(nd *kdv1alpha1.NodeDevice) {
			nd.Spec.Cordons = slices.DeleteFunc(nd.Spec.Cordons, func(c kdv1alpha1.DeviceCordon) bool { return c.DeviceID == id })
		}
		for _, i := range cordoning {
			if err := patchShard(ctx, c, &shards[i], drop, dryRun); err != nil {
				return fmt.Errorf("uncordoning %s %s: %w", t.Resource, id, err)
			}
			fmt.Fprintf(out, "nodedevice/%s uncordoned %s%s\n", shards[i].Name, id, dryRunSuffix(dryRun))
		}
	}
	return nil
}

// patchShard applies change to nd's spec with a merge patch that carries nd's resourceVersion,
// reading nd again and retrying on a conflict. With a client dry run it changes nd only.
func patchShard(ctx context.Context, c client.Client, nd *kdv1alpha1.NodeDevice, change func(*kdv1alpha1.NodeDevice), dryRun cmdutil.DryRunStrategy) error {
	if dryRun == cmdutil.DryRunClient {
		change(nd)
		return nil
	}
	var opts []client.PatchOption
	if dryRun == cmdutil.DryRunServer {
		opts = append(opts, client.DryRunAll)
	}
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := c.Get(ctx, client.ObjectKeyFromObject(nd), nd); err != nil {
				return err
			}
		}
		first = false
		orig := nd.DeepCopy()
		change(nd)
		return c.Patch(ctx, nd, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), opts...)
	})
}

func dryRunSuffix(dryRun cmdutil.DryRunStrategy) string {
	switch dryRun {
	case cmdutil.DryRunClient:
		return " (dry run)"
	case cmdutil.DryRunServer:
		return " (server dry run)"
	default:
		return ""
	}
}
