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
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

func TestAuthorPluginsRefuseBadFlags(t *testing.T) {
	tests := map[string]struct {
		opts Options
		want string
	}{
		"socket without resource": {Options{PluginSockets: []string{"/run/p.sock"}}, "want RESOURCE=SOCKET"},
		"DRA without a plugin":    {Options{PluginDRA: []string{"example.com/gpu"}}, "no --plugin or --plugin-socket serves it"},
		"DRA of the Gopher":       {Options{Plugins: []string{"p"}, PluginDRA: []string{ResourceName}}, "with --dra"},
		"DRA of no resource name": {Options{Plugins: []string{"p"}, PluginDRA: []string{"gpu"}}, "not an extended resource name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.opts.authorPlugins()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("authorPlugins() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	plugins, err := Options{Plugins: []string{"a", "b"}, PluginSockets: []string{"example.com/c=/run/c.sock"},
		PluginDRA: []string{"example.com/gpu"}}.authorPlugins()
	if err != nil {
		t.Fatalf("authorPlugins: %v", err)
	}
	var names []string
	for _, p := range plugins {
		names = append(names, p.name+":"+p.command+p.resource)
	}
	if diff := cmp.Diff([]string{"plugin-1:a", "plugin-2:b", "plugin-3:example.com/c"}, names); diff != "" {
		t.Errorf("plugins (-want +got):\n%s", diff)
	}
}

func TestAuthorPodNames(t *testing.T) {
	got := []string{authorPodName(0, 0), authorPodName(0, 1), authorPodName(1, 0), authorPodName(1, 2)}
	if diff := cmp.Diff([]string{"plugin-pod-1", "plugin-pod-1-2", "plugin-pod-2", "plugin-pod-2-3"}, got); diff != "" {
		t.Errorf("pod names (-want +got):\n%s", diff)
	}
}

// The agent goes first, so it sees no plugin go away; then the author's plugins; then the rest
// in the reverse order of their start.
func TestStopOrder(t *testing.T) {
	comp := func(name string) *component { return &component{name: name} }
	d := &dev{
		comps:   []*component{comp(schedulerName), comp(controllerName), comp(agentName), comp(pluginName)},
		authors: []*authorPlugin{{name: "plugin-1", comp: comp("plugin-1")}, {name: "plugin-2"}, {name: "plugin-3", comp: comp("plugin-3")}},
	}
	var got []string
	for _, c := range d.stopOrder() {
		got = append(got, c.name)
	}
	want := []string{agentName, "plugin-1", "plugin-3", pluginName, controllerName, schedulerName}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stop order (-want +got):\n%s", diff)
	}
}

// An author's plugin that ends stops only the waits that depend on it; one of the cluster's
// components that ends stops everything.
func TestAuthorPluginExitStopsOnlyItsWaits(t *testing.T) {
	dir := t.TempDir()
	c, err := startComponent("plugin-1", "/bin/sh", []string{"-c", "echo bye; exit 0"}, filepath.Join(dir, "plugin-1.log"))
	if err != nil {
		t.Fatalf("startComponent: %v", err)
	}
	<-c.done
	d := &dev{authors: []*authorPlugin{{name: "plugin-1", comp: c}}}
	if err := d.componentStopped(nil); err != nil {
		t.Errorf("componentStopped(nil) = %v, want nil: the cluster keeps running", err)
	}
	if err := d.componentStopped([]string{agentName}); err != nil {
		t.Errorf("componentStopped(agent) = %v, want nil", err)
	}
	if err := d.componentStopped([]string{"plugin-1", agentName}); err == nil || !strings.Contains(err.Error(), "plugin-1 stopped") {
		t.Errorf("componentStopped(plugin-1) = %v, want plugin-1's end", err)
	}
	if ended, how := c.ended(); !ended || how != "exit status 0" {
		t.Errorf("ended() = %v, %q, want true, exit status 0", ended, how)
	}
	core, err := startComponent(agentName, "/bin/sh", []string{"-c", "exit 2"}, filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatalf("startComponent: %v", err)
	}
	<-core.done
	d.comps = []*component{core}
	if err := d.componentStopped(nil); err == nil || !strings.Contains(err.Error(), agentName+" stopped") {
		t.Errorf("componentStopped(nil) = %v, want the agent's end", err)
	}
}

func nodeDevice(name, res string, shard int32, state kdv1alpha1.PluginState, devices map[string]kdv1alpha1.DeviceHealth) *kdv1alpha1.NodeDevice {
	nd := &kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       kdv1alpha1.NodeDeviceSpec{NodeName: NodeName, ResourceName: res, Shard: ptr.To(shard)},
	}
	nd.Status.Plugin = &kdv1alpha1.PluginStatus{State: state}
	for id, h := range devices {
		nd.Status.Devices = append(nd.Status.Devices, kdv1alpha1.DeviceStatus{ID: id, Health: h})
		nd.Status.Capacity++
		if h == kdv1alpha1.DeviceHealthy {
			nd.Status.Allocatable++
		}
	}
	return nd
}

// servedResources sums a resource's shards, and a wait on an author's plugin names the agent's
// refusal of its device list (the reason and the offending value) instead of a bare "0 devices".
func TestServedResources(t *testing.T) {
	scheme, err := contract.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	rejected := nodeDevice("n.rejected", "example.com/rejected", 0, kdv1alpha1.PluginStateRegistered, nil)
	rejected.Status.Conditions = []metav1.Condition{{Type: kdv1alpha1.NodeDeviceHealthy, Status: metav1.ConditionFalse,
		Reason: kdv1alpha1.ReasonDeviceListRejected, Message: `device ID "a/b" is invalid: it holds a '/'`}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&kdv1alpha1.NodeDevice{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*kdv1alpha1.NodeDevice).Spec.NodeName} }).
		WithObjects(
			nodeDevice("n.a0", "example.com/a", 0, kdv1alpha1.PluginStateRegistered, map[string]kdv1alpha1.DeviceHealth{"a-0": kdv1alpha1.DeviceHealthy}),
			nodeDevice("n.a1", "example.com/a", 1, kdv1alpha1.PluginStateRegistered, map[string]kdv1alpha1.DeviceHealth{"a-1": kdv1alpha1.DeviceUnhealthy}),
			nodeDevice("n.gone", "example.com/gone", 0, kdv1alpha1.PluginStateDisconnected, map[string]kdv1alpha1.DeviceHealth{"g-0": kdv1alpha1.DeviceUnhealthy}),
			rejected,
		).Build()
	all, err := servedResources(context.Background(), c)
	if err != nil {
		t.Fatalf("servedResources: %v", err)
	}
	got := newResources(all, []string{"example.com/gone"})
	want := []string{
		"example.com/a: plugin Registered, capacity 2, allocatable 1, devices [a-0(Healthy) a-1(Unhealthy)]",
		"example.com/rejected: plugin Registered, capacity 0, allocatable 0, devices []; " +
			`Healthy=False DeviceListRejected: device ID "a/b" is invalid: it holds a '/'`,
	}
	if diff := cmp.Diff(strings.Join(want, "; "), describeServed(got, "none")); diff != "" {
		t.Errorf("described (-want +got):\n%s", diff)
	}
	if !got[0].ready() || got[1].ready() {
		t.Errorf("ready: %v, %v; want the resource with a healthy device ready, the rejected one not", got[0].ready(), got[1].ready())
	}
	if got, want := printableID("\x00"), `"\x00"`; got != want {
		t.Errorf("printableID(NUL) = %s, want %s", got, want)
	}
	gone := pick(all, []string{"example.com/gone", "example.com/none"})
	if gone[0].state != string(kdv1alpha1.PluginStateDisconnected) || gone[1].state != "no NodeDevice" {
		t.Errorf("states %q, %q; want Disconnected, no NodeDevice", gone[0].state, gone[1].state)
	}
}
