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

package devenv

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// served is what the NodeDevices of one resource on the demo node say, summed over their shards.
type served struct {
	resource string
	// state is the plugin's state; "no plugin" when a shard has none, "Disconnected" when any
	// shard says so.
	state                            string
	capacity, allocatable, allocated int64
	// devices are the devices as id(health).
	devices []string
	// rejected is the agent's refusal of the plugin's latest device list (the Healthy condition
	// False with reason DeviceListRejected): its reason and message; empty when none.
	rejected string
}

// ready says whether a plugin serves the resource with a healthy device.
func (s *served) ready() bool {
	return s.state == string(kdv1alpha1.PluginStateRegistered) && s.allocatable > 0 && s.rejected == ""
}

func (s *served) String() string {
	out := fmt.Sprintf("%s: plugin %s, capacity %d, allocatable %d, devices [%s]",
		s.resource, s.state, s.capacity, s.allocatable, strings.Join(s.devices, " "))
	if s.rejected != "" {
		out += "; " + s.rejected
	}
	return out
}

// servedResources returns what the demo node's NodeDevices say of each resource.
func servedResources(ctx context.Context, c client.Client) (map[string]*served, error) {
	var list kdv1alpha1.NodeDeviceList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": NodeName}); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of %s: %w", NodeName, err)
	}
	all := map[string]*served{}
	for _, nd := range list.Items {
		s := all[nd.Spec.ResourceName]
		if s == nil {
			s = &served{resource: nd.Spec.ResourceName, state: string(kdv1alpha1.PluginStateRegistered)}
			all[s.resource] = s
		}
		s.add(&nd)
	}
	return all, nil
}

// add counts one shard.
func (s *served) add(nd *kdv1alpha1.NodeDevice) {
	st := nd.Status
	switch {
	case st.Plugin == nil:
		s.state = "no plugin"
	case st.Plugin.State != kdv1alpha1.PluginStateRegistered && s.state == string(kdv1alpha1.PluginStateRegistered):
		s.state = string(st.Plugin.State)
	}
	s.capacity += int64(st.Capacity)
	s.allocatable += int64(st.Allocatable)
	s.allocated += int64(st.Allocated)
	for _, dev := range st.Devices {
		s.devices = append(s.devices, printableID(dev.ID)+"("+string(dev.Health)+")")
	}
	if cond := apimeta.FindStatusCondition(st.Conditions, kdv1alpha1.NodeDeviceHealthy); cond != nil &&
		cond.Status == metav1.ConditionFalse && cond.Reason == kdv1alpha1.ReasonDeviceListRejected {
		s.rejected = fmt.Sprintf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
}

// printableID is a device ID as a terminal can show it: quoted when it holds a character that is
// not printable (the kubelet accepts control characters, NUL included).
func printableID(id string) string {
	if strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(id)
	}
	return id
}

// newResources returns the resources of all that are not among known, in name order.
func newResources(all map[string]*served, known []string) []*served {
	var out []*served
	for res, s := range all {
		if !slices.Contains(known, res) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *served) int { return strings.Compare(a.resource, b.resource) })
	return out
}

// pick returns the resources of all that are in names, in the order of names; a resource with
// no NodeDevice shows as such.
func pick(all map[string]*served, names []string) []*served {
	out := make([]*served, 0, len(names))
	for _, res := range names {
		s := all[res]
		if s == nil {
			s = &served{resource: res, state: "no NodeDevice"}
		}
		out = append(out, s)
	}
	return out
}

func resourceNames(ss []*served) []string {
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		names = append(names, s.resource)
	}
	return names
}

// describeServed describes each resource for a wait's "last seen", none when there is none.
func describeServed(ss []*served, none string) string {
	if len(ss) == 0 {
		return none
	}
	parts := make([]string, 0, len(ss))
	for _, s := range ss {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, "; ")
}

// describeCounts is the progress line's detail of a plugin's resources.
func describeCounts(ss []*served) string {
	parts := make([]string, 0, len(ss))
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%s: %d devices, %d allocatable", s.resource, s.capacity, s.allocatable))
	}
	return strings.Join(parts, "; ")
}
