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

package dra

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// staleTimeout bounds taintStale's API calls together.
const staleTimeout = 10 * time.Second

// taintStale gives every device of the node's existing ResourceSlices of the driver the taints
// the core's state snaps gives it, and returns how many slices it updated. It changes nothing but
// taints: devices, attributes, pools and names stay as an earlier run of the agent published
// them, for the ResourceSlice controller to bring up to date once it has synced.
//
// It is for an agent's start, when the controller has not synced yet (it takes a second, see
// sliceController): until then the slices an agent that was killed published offer its devices
// untainted, while their plugins may be gone. The restored state taints every device whose plugin
// has not registered again (plugin-disconnected, AwaitingPluginRegistration); a device the state
// does not know (its resource was not restored, or is no longer served through DRA) gets that
// taint too. Each update is conditional on the slice's resourceVersion, under the agent's field
// owner, and the controller writes nothing before the flow's first Update, which follows this.
func taintStale(ctx context.Context, client kubernetes.Interface, node string, snaps []nodeagent.ResourceSnapshot) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, staleTimeout)
	defer cancel()
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, DriverName),
	)
	slices := client.ResourceV1().ResourceSlices()
	list, err := slices.List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return 0, fmt.Errorf("listing the node's ResourceSlices: %w", err)
	}
	want := stateTaints(snaps)
	updated := 0
	var errs []error
	for i := range list.Items {
		s := &list.Items[i]
		if !retaint(s, want[s.Spec.Pool.Name]) {
			continue
		}
		if _, err := slices.Update(ctx, s, metav1.UpdateOptions{FieldManager: contract.AgentFieldOwner}); err != nil {
			errs = append(errs, fmt.Errorf("tainting the devices of ResourceSlice %s: %w", s.Name, err))
			continue
		}
		updated++
	}
	return updated, errors.Join(errs...)
}

// stateTaints are the taints of every device of the DRA-served resources in snaps, by pool and
// device name, as the slices would publish them.
func stateTaints(snaps []nodeagent.ResourceSnapshot) map[string]map[string][]resourceapi.DeviceTaint {
	_, pools := driverResources(snaps)
	out := make(map[string]map[string][]resourceapi.DeviceTaint, len(pools))
	for name, p := range pools {
		devices := map[string][]resourceapi.DeviceTaint{}
		for _, s := range p.slices {
			for _, d := range s.Devices {
				devices[d.Name] = d.Taints
			}
		}
		out[name] = devices
	}
	return out
}

// unknownDeviceTaints are the taints of a device the state does not know.
func unknownDeviceTaints() []resourceapi.DeviceTaint {
	return []resourceapi.DeviceTaint{{Key: TaintPluginDisconnected, Value: nodeagent.ReasonAwaitingPlugin, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
}

// retaint sets the taints of each device of s to its taints in want (by device name; those of a
// device want does not have: unknownDeviceTaints), keeping the time a taint it had already was
// added, and reports whether any changed.
func retaint(s *resourceapi.ResourceSlice, want map[string][]resourceapi.DeviceTaint) bool {
	changed := false
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		taints, ok := want[d.Name]
		if !ok {
			taints = unknownDeviceTaints()
		}
		if sameTaints(d.Taints, taints) {
			continue
		}
		next := make([]resourceapi.DeviceTaint, len(taints))
		for j, t := range taints {
			next[j] = t
			for _, old := range d.Taints {
				if old.Key == t.Key && old.Value == t.Value && old.Effect == t.Effect {
					next[j].TimeAdded = old.TimeAdded
				}
			}
		}
		d.Taints, changed = next, true
	}
	return changed
}

// sameTaints compares taints by key, value and effect, in order; the time added (which the API
// server sets) does not count.
func sameTaints(a, b []resourceapi.DeviceTaint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}
