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
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// healthResend is how often the health of every device is sent to the kubelet although nothing
// changed: the kubelet reports a device's health as unknown when it was not refreshed within
// healthTimeout.
const (
	healthResend  = 20 * time.Second
	healthTimeout = time.Minute
)

// driver implements kubeletplugin.DRAPlugin over the core.
type driver struct {
	core Core
	cdi  *cdiWriter
	// fatal receives a background error that retrying does not resolve; the runnable returns it.
	fatal chan error
}

var _ kubeletplugin.DRAPlugin = &driver{}

// PrepareResourceClaims prepares each claim: the devices of kubedevice's driver in its allocation
// are allocated in the core (the plugins' Allocate, PreStartContainer where required, the
// checkpoint written), its CDI spec is written, and the CDI device IDs are returned. A claim whose
// preparation fails gets its error (the kubelet retries); the others are prepared.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(ctx, claim)
		countPrepare(err)
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

// prepare prepares one claim.
func (d *driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	results, err := driverResults(claim)
	if err != nil || len(results) == 0 {
		return nil, err
	}
	ref := nodeagent.ClaimRef{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name}
	devs, err := d.resolve(ref, results)
	if err != nil {
		return nil, err
	}
	alloc, err := d.core.PrepareClaim(ctx, ref, claimRequests(devs))
	if err != nil {
		return nil, err
	}
	spec, ids, dropped := claimSpec(alloc)
	if len(dropped) > 0 {
		logger.Info("The device plugins' Allocate responses hold annotations, which have no CDI equivalent: dropped", "annotations", dropped)
	}
	// Written on every prepare, so a spec lost with /var/run/cdi (a tmpfs) after a reboot comes
	// back when the kubelet prepares the claim again.
	if err := d.cdi.write(ref.UID, spec); err != nil {
		return nil, err
	}
	devices := kubeletDevices(devs, alloc, ids)
	logger.V(2).Info("Prepared claim", "devices", len(devices))
	return devices, nil
}

// driverResults are the claim's allocation results of kubedevice's driver.
func driverResults(claim *resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, error) {
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			// Admin access shares a device another claim may hold; a device plugin's Allocate
			// hands a device to one container at a time.
			return nil, fmt.Errorf("claim %s/%s: admin access to device %s/%s is not supported by the %s driver", claim.Namespace, claim.Name, r.Pool, r.Device, DriverName)
		}
		results = append(results, r)
	}
	return results, nil
}

// target is the plugin device an allocated device is: its resource and device ID.
type target struct{ resource, id string }

// claimDevice is an allocation result of kubedevice's driver and the plugin device it is.
type claimDevice struct {
	resourceapi.DeviceRequestAllocationResult
	target
}

// resolve maps the results to plugin devices. Device names map back to plugin IDs through the
// published pools; a claim the core holds already maps through its record (names are a function
// of the IDs), so it is prepared again even if its plugin has gone for good meanwhile.
func (d *driver) resolve(ref nodeagent.ClaimRef, results []resourceapi.DeviceRequestAllocationResult) ([]claimDevice, error) {
	type deviceKey struct{ pool, device string }
	known := map[deviceKey]target{}
	if prev, ok := d.core.Claim(ref.UID); ok {
		for _, ra := range prev.Resources {
			for _, id := range ra.DeviceIDs {
				known[deviceKey{PoolName(ra.ResourceName), DeviceName(id)}] = target{ra.ResourceName, id}
			}
		}
	}
	var pools map[string]pool
	devs := make([]claimDevice, 0, len(results))
	for _, r := range results {
		t, ok := known[deviceKey{r.Pool, r.Device}]
		if !ok {
			if pools == nil {
				_, pools = driverResources(d.core.Snapshots())
			}
			p, found := pools[r.Pool]
			id, found2 := p.ids[r.Device]
			if !found || !found2 {
				return nil, errUnknownDevice(r.Pool, r.Device)
			}
			t = target{p.resource, id}
		}
		devs = append(devs, claimDevice{r, t})
	}
	return devs, nil
}

// claimRequests groups the devices by request and resource, in the order each group comes first.
func claimRequests(devs []claimDevice) []nodeagent.ClaimRequest {
	var reqs []nodeagent.ClaimRequest
	at := map[[2]string]int{}
	for _, d := range devs {
		k := [2]string{d.Request, d.resource}
		i, ok := at[k]
		if !ok {
			i, at[k] = len(reqs), len(reqs)
			reqs = append(reqs, nodeagent.ClaimRequest{Request: d.Request, ResourceName: d.resource})
		}
		reqs[i].DeviceIDs = append(reqs[i].DeviceIDs, d.id)
	}
	return reqs
}

// kubeletDevices are the prepared devices as the kubelet takes them. The CDI devices of a request
// and resource go with the first device of that group in the allocation, so a container using the
// request gets them once.
func kubeletDevices(devs []claimDevice, alloc nodeagent.ClaimAllocation, ids [][]string) []kubeletplugin.Device {
	groupIDs := map[[2]string][]string{}
	for i, ra := range alloc.Resources {
		groupIDs[[2]string{ra.Request, ra.ResourceName}] = ids[i]
	}
	var devices []kubeletplugin.Device
	for _, d := range devs {
		k := [2]string{cmp.Or(d.Request, nodeagent.ClaimContainer), d.resource}
		dev := kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device}
		if cdi, ok := groupIDs[k]; ok {
			dev.CDIDeviceIDs = cdi
			delete(groupIDs, k)
		}
		devices = append(devices, dev)
	}
	return devices
}

// UnprepareResourceClaims frees each claim's devices in the core and removes its CDI spec. A claim
// that is not prepared (any more) is not an error: the kubelet retries.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.cdi.remove(string(c.UID))
		if err == nil {
			_, err = d.core.UnprepareClaim(ctx, string(c.UID))
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs a background error (ResourceSlice publishing, the gRPC servers); one that is
// not recoverable stops the DRA flow, and with it the agent, which its DaemonSet restarts.
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		return
	}
	select {
	case d.fatal <- fmt.Errorf("%s: %w", msg, err):
	default:
	}
}

// WatchHealthStatus reports the health of every device of the DRA-served resources to the kubelet
// (KEP-4680: the kubelet shows it in the pod status of the pods holding them): at once, on every
// change the core announces, and every healthResend.
func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	sub := d.core.Subscribe()
	defer sub.Close()
	tick := time.NewTicker(healthResend)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- healthReport(d.core.Snapshots(), time.Now()):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Ready():
			sub.Changed()
		case <-tick.C:
		}
	}
}

// unknownHealth reports whether a device unhealthy for reason is of unknown health rather than
// unhealthy: its plugin disconnected (within the grace period), or has not registered again since
// the agent restarted, so nothing says how the device is, as the API's ResourceHealth reads
// Unknown ("Device Plugin got unregistered and hasn't been re-registered since"). The device is
// not allocatable meanwhile (the slices taint it); a container holding it still has it.
func unknownHealth(reason string) bool {
	return reason == nodeagent.ReasonPluginDisconnected || reason == nodeagent.ReasonAwaitingPlugin
}

// healthReport is the health of every device of the DRA-served resources: Healthy, Unhealthy (the
// plugin reports it so, or no longer lists it while it is held) or Unknown (unknownHealth), with
// the reason and message of a device that is not Healthy.
func healthReport(snaps []nodeagent.ResourceSnapshot, now time.Time) kubeletplugin.DeviceHealthReport {
	var out kubeletplugin.DeviceHealthReport
	for _, s := range snaps {
		if !s.ServedByDRA {
			continue
		}
		poolName := PoolName(s.ResourceName)
		p := poolOf(s)
		for _, dev := range s.Devices {
			name, ok := p.names[dev.ID]
			if !ok {
				continue
			}
			h := kubeletplugin.DeviceHealth{
				PoolName: poolName, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: now, HealthCheckTimeout: healthTimeout,
			}
			if dev.Health != nodeagent.Healthy {
				h.Health = kubeletplugin.HealthStatusUnhealthy
				if unknownHealth(dev.Reason) {
					h.Health = kubeletplugin.HealthStatusUnknown
				}
				h.Message = dev.Reason
				if dev.Message != "" {
					h.Message += ": " + dev.Message
				}
			}
			out.Devices = append(out.Devices, h)
		}
	}
	slices.SortFunc(out.Devices, func(a, b kubeletplugin.DeviceHealth) int {
		return cmp.Or(strings.Compare(a.PoolName, b.PoolName), strings.Compare(a.DeviceName, b.DeviceName))
	})
	return out
}
