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

package plugincheck

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func (r *resourceRun) checkPreStart(ctx context.Context) {
	started := time.Now()
	if !r.opts2.GetPreStartRequired() {
		r.record(CheckPreStart, Skip, started, "GetDevicePluginOptions says pre_start_required=false: the kubelet never calls PreStartContainer")
		return
	}
	if len(r.allocated) == 0 {
		r.record(CheckPreStart, Skip, started, "no device could be allocated to start a container with")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, preStartTimeout)
	defer cancel()
	_, err := r.client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: r.allocated})
	if err != nil {
		r.record(CheckPreStart, Fail, started, fmt.Sprintf("PreStartContainer(%q): %v", r.allocated, err))
		return
	}
	r.record(CheckPreStart, Pass, started, fmt.Sprintf("PreStartContainer(%q) answered in %s", r.allocated, seconds(time.Since(started))))
}

func (r *resourceRun) checkPreferred(ctx context.Context) {
	checks := []Check{CheckPreferredAnswers, CheckPreferredMustInclude, CheckPreferredSize, CheckPreferredAvailable}
	if !r.opts2.GetGetPreferredAllocationAvailable() {
		r.skipAll("GetDevicePluginOptions says get_preferred_allocation_available=false: the kubelet never calls GetPreferredAllocation", checks...)
		return
	}
	healthy := r.healthy()
	if len(healthy) == 0 {
		r.skipAll("the plugin lists no healthy device", checks...)
		return
	}
	// With 3 or more devices: the first is left out of the available ones, the last must be
	// included, and 2 are asked for; a plugin that picks from its own list, or the first ones,
	// gets caught.
	req := &v1beta1.ContainerPreferredAllocationRequest{AvailableDeviceIDs: healthy, MustIncludeDeviceIDs: healthy[len(healthy)-1:], AllocationSize: 1}
	switch {
	case len(healthy) >= 3:
		req.AvailableDeviceIDs, req.AllocationSize = healthy[1:], 2
	case len(healthy) == 2:
		req.AllocationSize = 2
	}
	started := time.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, r.t.RPC)
	defer cancel()
	resp, err := r.client.GetPreferredAllocation(rpcCtx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{req}})
	describe := fmt.Sprintf("GetPreferredAllocation(available %q, must_include %q, size %d)", req.AvailableDeviceIDs, req.MustIncludeDeviceIDs, req.AllocationSize)
	switch {
	case err != nil:
		why := err.Error()
		if status.Code(err) == codes.Unimplemented {
			why += " (the options say it is available)"
		}
		r.record(CheckPreferredAnswers, Fail, started, describe+": "+why)
		r.skipAll("GetPreferredAllocation did not answer", checks[1:]...)
		return
	case len(resp.GetContainerResponses()) == 0:
		// The kubelet reads ContainerResponses[0] only when there is one: none is no preference.
		r.record(CheckPreferredAnswers, Warn, started, describe+" answered no container response: the kubelet takes that as no preference and picks the devices itself")
		r.skipAll("GetPreferredAllocation answered no preference", checks[1:]...)
		return
	case len(resp.GetContainerResponses()) != 1:
		r.record(CheckPreferredAnswers, Fail, started, fmt.Sprintf("%s answered %d container responses for 1 container request", describe, len(resp.GetContainerResponses())))
		r.skipAll("GetPreferredAllocation did not answer one container response", checks[1:]...)
		return
	}
	got := resp.GetContainerResponses()[0].GetDeviceIDs()
	r.record(CheckPreferredAnswers, Pass, started, fmt.Sprintf("%s answered %q", describe, got))
	must, size, avail := validatePreferred(req, got)
	ok := fmt.Sprintf("%s answered %q", describe, got)
	r.verdict(CheckPreferredMustInclude, started, prefixAll(describe+": ", must), ok)
	r.verdict(CheckPreferredSize, started, prefixAll(describe+": ", size), ok)
	r.verdict(CheckPreferredAvailable, started, prefixAll(describe+": ", avail), ok)
}
