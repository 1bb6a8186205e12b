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

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// responseChecks judge the allocation responses.
var responseChecks = []Check{CheckPaths, CheckPermissions, CheckDuplicates, CheckCDINames}

func (r *resourceRun) allocate(ctx context.Context, containers ...[]string) (*v1beta1.AllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, r.t.RPC)
	defer cancel()
	req := &v1beta1.AllocateRequest{}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &v1beta1.ContainerAllocateRequest{DevicesIds: ids})
	}
	return r.client.Allocate(ctx, req)
}

// checkAllocate asks for each healthy device, for several, and for an unknown one, then judges
// every response it got.
func (r *resourceRun) checkAllocate(ctx context.Context) {
	healthy := r.healthy()
	if len(healthy) == 0 {
		r.skipAll("the plugin lists no healthy device", CheckAllocateEach, CheckAllocateSeveral, CheckAllocateUnknown)
		r.skipAll("no allocation response to look at", responseChecks...)
		return
	}
	r.allocateEach(ctx, healthy)
	r.allocateSeveral(ctx, healthy)
	started := time.Now()
	if _, err := r.allocate(ctx, []string{unknownDeviceID}); err != nil {
		r.record(CheckAllocateUnknown, Pass, started, fmt.Sprintf("Allocate([%q]) refused: %v", unknownDeviceID, err))
	} else {
		r.record(CheckAllocateUnknown, Warn, started, fmt.Sprintf("Allocate([%q]), a device the plugin never listed, succeeded", unknownDeviceID))
	}
	if len(r.responses) == 0 {
		r.skipAll("no allocation response to look at", responseChecks...)
		return
	}
	r.judgeResponses()
}

// allocateEach records allocate/each-device: Allocate for each healthy device on its own.
func (r *resourceRun) allocateEach(ctx context.Context, healthy []string) {
	started := time.Now()
	var problems []string
	each := healthy[:min(len(healthy), maxEachDevice)]
	for _, id := range each {
		resp, err := r.allocate(ctx, []string{id})
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("Allocate([%q]): %v", id, err))
		case len(resp.GetContainerResponses()) != 1:
			problems = append(problems, fmt.Sprintf("Allocate([%q]) answered %d container responses for 1 container request", id, len(resp.GetContainerResponses())))
		default:
			r.responses = append(r.responses, resp.GetContainerResponses()[0])
			if r.allocated == nil {
				r.allocated = []string{id}
			}
		}
	}
	r.verdict(CheckAllocateEach, started, problems, fmt.Sprintf("Allocate answered for each of %d healthy devices", len(each)))
}

// allocateSeveral records allocate/several: Allocate for up to 8 devices in one container, then
// for two containers.
func (r *resourceRun) allocateSeveral(ctx context.Context, healthy []string) {
	started := time.Now()
	if len(healthy) < 2 {
		r.record(CheckAllocateSeveral, Skip, started, fmt.Sprintf("the plugin lists %d healthy device; several need 2", len(healthy)))
		return
	}
	several := healthy[:min(len(healthy), 8)]
	resp, err := r.allocate(ctx, several)
	switch {
	case err != nil:
		r.record(CheckAllocateSeveral, Fail, started, fmt.Sprintf("Allocate(%q) in one container: %v", several, err))
		return
	case len(resp.GetContainerResponses()) != 1:
		r.record(CheckAllocateSeveral, Fail, started, fmt.Sprintf("Allocate(%q) in one container answered %d container responses", several, len(resp.GetContainerResponses())))
		return
	}
	r.responses = append(r.responses, resp.GetContainerResponses()[0])
	r.allocated = several
	resp2, err := r.allocate(ctx, healthy[:1], healthy[1:2])
	switch {
	case err != nil:
		r.record(CheckAllocateSeveral, Warn, started, fmt.Sprintf("Allocate for two containers, [%q] and [%q]: %v", healthy[0], healthy[1], err))
	case len(resp2.GetContainerResponses()) != 2:
		r.record(CheckAllocateSeveral, Warn, started, fmt.Sprintf("Allocate for two containers answered %d container responses", len(resp2.GetContainerResponses())))
	default:
		r.responses = append(r.responses, resp2.GetContainerResponses()...)
		r.record(CheckAllocateSeveral, Pass, started, fmt.Sprintf("Allocate(%q) in one container, and for two containers, answered", several))
	}
}

// responseCounts are how many of each thing the allocation responses hold.
type responseCounts struct{ mounts, devs, cdis, envs, annotations int }

// judgeResponses runs the response checks over every successful container response; a check
// with nothing to look at (no device node to hold permissions, no CDI device) is skipped.
func (r *resourceRun) judgeResponses() {
	started := time.Now()
	var all responseProblems
	var n responseCounts
	for _, resp := range r.responses {
		p := validateContainerResponse(r.name, resp)
		all.paths, all.permissions = append(all.paths, p.paths...), append(all.permissions, p.permissions...)
		all.duplicates, all.cdi = append(all.duplicates, p.duplicates...), append(all.cdi, p.cdi...)
		all.repeats, all.warnings = append(all.repeats, p.repeats...), append(all.warnings, p.warnings...)
		n.mounts, n.devs, n.cdis = n.mounts+len(resp.GetMounts()), n.devs+len(resp.GetDevices()), n.cdis+len(resp.GetCdiDevices())
		n.envs, n.annotations = n.envs+len(resp.GetEnvs()), n.annotations+len(resp.GetAnnotations())
	}
	none := fmt.Sprintf("the %d allocation responses hold", len(r.responses))
	if n.mounts+n.devs+n.envs+n.annotations == 0 {
		r.record(CheckPaths, Skip, started, none+" no mount, device node, env or annotation: no path to check")
	} else {
		r.verdict(CheckPaths, started, uniq(all.paths), fmt.Sprintf("%d responses: %d mounts, %d device nodes, %d envs, %d annotations; the agent accepts them all",
			len(r.responses), n.mounts, n.devs, n.envs, n.annotations))
	}
	r.judgePermissions(started, n.devs, none, uniq(all.permissions), uniq(all.warnings))
	if n.mounts+n.devs+n.cdis == 0 {
		r.record(CheckDuplicates, Skip, started, none+" no mount, device node or CDI device: nothing to repeat")
	} else {
		ok := []string{fmt.Sprintf("%d responses without conflicting duplicates", len(r.responses))}
		if rep := uniq(all.repeats); len(rep) > 0 {
			ok = append(ok, prefixAll("identical repeats, which the kubelet merges: ", rep)...)
		}
		r.verdict(CheckDuplicates, started, uniq(all.duplicates), ok...)
	}
	if n.cdis == 0 {
		r.record(CheckCDINames, Skip, started, none+" no CDI device: no name to check")
	} else {
		r.verdict(CheckCDINames, started, uniq(all.cdi), fmt.Sprintf("%d CDI devices, names fully qualified", n.cdis))
	}
}

// judgePermissions records allocate/permissions: a failure for permissions the agent refuses, a
// warning for none at all.
func (r *resourceRun) judgePermissions(started time.Time, devs int, none string, problems, warnings []string) {
	switch {
	case devs == 0:
		r.record(CheckPermissions, Skip, started, none+" no device node: no permissions to check")
	case len(problems) > 0:
		r.record(CheckPermissions, Fail, started, problems...)
	case len(warnings) > 0:
		r.record(CheckPermissions, Warn, started, warnings...)
	default:
		r.record(CheckPermissions, Pass, started, fmt.Sprintf("%d device nodes, permissions well formed", devs))
	}
}
