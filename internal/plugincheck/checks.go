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
	"slices"
	"strings"
	"time"
)

// Outcome is how a check ended.
type Outcome string

// The outcomes of a check. Only Fail makes the run fail; Warn does too with Options.Strict.
const (
	Pass Outcome = "PASS"
	Fail Outcome = "FAIL"
	Skip Outcome = "SKIP"
	Warn Outcome = "WARN"
)

// Check is one rule the checker enforces.
type Check struct {
	// ID names the check in the report and in JUnit (e.g. registration/version).
	ID string
	// Rule is the rule it enforces and where it comes from: the kubelet's behaviour (the section
	// of docs/kubelet-devicemanager notes, file and function) or the API's comment.
	Rule string
}

// The checks, in the order they run.
var (
	CheckRegistered = Check{"registration/registered",
		"The plugin calls Register on <plugin dir>/kubelet.sock, serving its DevicePlugin service first: the kubelet dials the endpoint back and calls GetDevicePluginOptions inside Register and rejects the registration when that fails (kubelet plugin/v1beta1/server.go Register -> connectClient, \"failed to get device plugin options\")."}
	CheckVersion = Check{"registration/version",
		"RegisterRequest.version is \"v1beta1\", the only entry of SupportedVersions (kubelet server.go isVersionCompatibleWithPlugin; else \"requested API version %q is not supported by kubelet\")."}
	CheckResourceName = Check{"registration/resource-name",
		"RegisterRequest.resource_name is an extended resource name: domain-prefixed, outside *kubernetes.io/, and \"requests.<name>\" a qualified name (kubelet v1helper.IsExtendedResourceName; else \"the ResourceName %q is invalid\")."}
	CheckEndpoint = Check{"registration/endpoint",
		"RegisterRequest.endpoint is the file name of a unix socket in the plugin directory (API: \"PATH = path.Join(DevicePluginPath, endpoint)\"; the kubelet joins it to its socket directory unchecked and dials it)."}
	CheckOptions = Check{"registration/options",
		"RegisterRequest.options equal what GetDevicePluginOptions answers: the kubelet ignores the registered options and acts only on GetDevicePluginOptions (kubelet manager.go PluginConnected), so a plugin whose two answers differ does not get what it asked for."}
	CheckFirstList = Check{"list-and-watch/first-response",
		"ListAndWatch sends the full device list promptly and keeps the stream open (API: \"ListAndWatch returns a stream of List of Devices\"; the kubelet publishes no capacity before the first message, and its e2e tests expect capacity within 30 s of the plugin's start). The kubelet uses the latest list: lists that follow within the settle window (1 s) replace the first, and the other checks judge the settled list (both are in the evidence)."}
	CheckDeviceIDs = Check{"list-and-watch/device-ids",
		"Device IDs are non-empty, at most 63 characters, and unique in a list (API Device.ID: \"A unique ID ... Max length of this field is 63 characters\"; the kubelet overwrites duplicates silently). Any characters are accepted, control characters and NUL included, as the kubelet accepts them; the report quotes IDs (%q)."}
	CheckHealthValues = Check{"list-and-watch/health-values",
		"Device.health is \"Healthy\" or \"Unhealthy\" (API constants.go), and NUMA node IDs are not negative: the kubelet treats any other health string as unhealthy."}
	CheckAllocateEach = Check{"allocate/each-device",
		"Allocate succeeds for every healthy device and answers one ContainerAllocateResponse per container request: the kubelet allocates any healthy device and fails admission on an error or on \"no containers return in allocation response\" (kubelet manager.go allocateContainerResources)."}
	CheckAllocateSeveral = Check{"allocate/several",
		"Allocate succeeds for several healthy devices in one container, and answers as many container responses as container requests (API AllocateRequest/AllocateResponse are per container; the kubelet sends one container per call and reads only the first response, so a count mismatch with two containers is a warning)."}
	CheckAllocateUnknown = Check{"allocate/unknown-device",
		"Allocate refuses a device ID the plugin never listed (API AllocateResponse: when allocation of a device fails, \"the Device plugin should ... fail the Allocation request\"). The kubelet never sends unknown IDs, so accepting one is a warning, a failure with --strict."}
	CheckPaths = Check{"allocate/paths",
		"Mount and DeviceSpec container and host paths are absolute and clean, and env names are variable names: the kubelet passes them to the runtime as they are (kubelet pod_devices.go deviceRunContainerOptions), and runtimes reject relative paths."}
	CheckPermissions = Check{"allocate/permissions",
		"DeviceSpec.permissions are one or more of r, w, m, each once (API DeviceSpec: \"Cgroups permissions of the device, candidates are one or more of r, w, m\")."}
	CheckDuplicates = Check{"allocate/duplicates",
		"A container response puts one thing at each container path: the kubelet keys mounts and device nodes by container path and keeps the first it meets (in random order across resources), only logging a different host path or permissions (kubelet pod_devices.go deviceRunContainerOptions), so a conflict fails. Identical repeats (one device node shared by several device IDs) and repeated CDI names are merged and pass."}
	CheckCDINames = Check{"allocate/cdi-names",
		"CDI device names are fully qualified, vendor.com/class=name, per the CDI specification (API CDIDevice.name: \"Fully qualified CDI device name\")."}
	CheckPreStart = Check{"pre-start-container",
		"A plugin whose options say PreStartRequired answers PreStartContainer for allocated devices within 30 s (API: PreStartContainer \"is called, if indicated by Device Plugin ... before each container start\"; the kubelet fails the container's start on an error, with a 30 s deadline, KubeletPreStartContainerRPCTimeoutInSecs)."}
	CheckPreferredAnswers = Check{"preferred-allocation/answers",
		"A plugin whose options say GetPreferredAllocationAvailable answers GetPreferredAllocation with one response per container request: the kubelet fails the whole allocation when the call fails (kubelet manager.go callGetPreferredAllocationIfAvailable, \"device plugin GetPreferredAllocation rpc failed\"). An answer with no container response is no preference to the kubelet (it fills the allocation itself): a warning, a failure with --strict."}
	CheckPreferredMustInclude = Check{"preferred-allocation/must-include",
		"The preferred allocation includes every must_include device (API PreferredAllocationRequest: \"making sure to include the set of devices listed in 'must_include_deviceIDs'\")."}
	CheckPreferredSize = Check{"preferred-allocation/size",
		"The preferred allocation has allocation_size devices, each once (API PreferredAllocationRequest: \"calculate a preferred allocation of size 'allocation_size'\")."}
	CheckPreferredAvailable = Check{"preferred-allocation/available",
		"The preferred allocation holds only available devices (API: \"take the list of available_deviceIDs and calculate a preferred allocation ... from them\"; the kubelet ignores the others)."}
	CheckHealthUpdate = Check{"list-and-watch/health-update",
		"When a device's state changes, ListAndWatch sends the new full list (API: \"Whenever a Device state change or a Device disappears, ListAndWatch returns the new list\"; each message replaces the resource's whole device set in the kubelet): a changed health, or a list without the removed device (or with an added one), both pass, and the evidence says which. A list that changes a health and lacks other devices is a partial list and fails. The health change hook runs on the first stream and again on the stream after the kubelet restart, and must change the devices each time."}
	CheckStreamOpen = Check{"list-and-watch/stream-open",
		"Each ListAndWatch stream stays open while the plugin runs, held at least the stated time (10 s by default) and until the kubelet closes it, before and after the kubelet restart: the kubelet never calls ListAndWatch again, and the resource's devices turn unhealthy the moment the stream ends, until the plugin registers again (kubelet client.go Run, \"ListAndWatch ended unexpectedly\")."}
	CheckReregistration = Check{"registration/after-kubelet-restart",
		"After the kubelet restarts (it removes every socket in the plugin directory, CleanupPluginDirectory, and creates kubelet.sock again), the plugin registers again and serves ListAndWatch within the stated time (30 s by default: the kubelet's e2e tests expect capacity back within 30 s of a kubelet restart)."}
	CheckStop = Check{"stop/socket-removed",
		"On SIGTERM the plugin exits within the stated time (10 s by default) and removes its socket: a socket left behind looks like a live plugin (the plugin watcher deregisters a plugin when its socket is deleted; the kubelet removes stale sockets only when it starts)."}
)

// AllChecks are the checks in the order they run.
var AllChecks = []Check{
	CheckRegistered, CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions,
	CheckFirstList, CheckDeviceIDs, CheckHealthValues,
	CheckAllocateEach, CheckAllocateSeveral, CheckAllocateUnknown,
	CheckPaths, CheckPermissions, CheckDuplicates, CheckCDINames,
	CheckPreStart, CheckPreferredAnswers, CheckPreferredMustInclude, CheckPreferredSize, CheckPreferredAvailable,
	CheckHealthUpdate, CheckStreamOpen, CheckReregistration, CheckStop,
}

// Result is the outcome of one check and what it saw.
type Result struct {
	Check    Check
	Outcome  Outcome
	Evidence []string
	Duration time.Duration
	// ended is when the check was judged.
	ended time.Time
}

// Report is the outcome of a run.
type Report struct {
	// Plugin describes what was checked.
	Plugin string
	// Resource is the resource name the plugin registered, when it did.
	Resource string
	Results  []Result
	Duration time.Duration
	// Strict counts warnings as failures.
	Strict bool
	// Interrupted says the run was interrupted (Ctrl-C): the checks that were running or had not
	// run are skipped, not failed.
	Interrupted bool
}

// Failed says whether any check failed (or warned, when strict).
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Outcome == Fail || (r.Strict && res.Outcome == Warn) {
			return true
		}
	}
	return false
}

// Count returns how many checks ended with o.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, res := range r.Results {
		if res.Outcome == o {
			n++
		}
	}
	return n
}

// Result returns the result of the check with that ID, and whether there is one.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.Check.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// sortResults puts the results in the order of AllChecks: some checks are judged over the whole
// run (list-and-watch/health-update and stream-open, before and after the kubelet restart) and end
// after checks listed later.
func (r *Report) sortResults() {
	index := func(res Result) int {
		return slices.IndexFunc(AllChecks, func(c Check) bool { return c.ID == res.Check.ID })
	}
	slices.SortStableFunc(r.Results, func(a, b Result) int { return index(a) - index(b) })
}

// markInterrupted skips every check that failed or warned once the run was interrupted at `at`:
// what the interruption cut short says nothing about the plugin.
func (r *Report) markInterrupted(at time.Time) {
	r.Interrupted = true
	for i := range r.Results {
		res := &r.Results[i]
		if res.ended.Before(at) || (res.Outcome != Fail && res.Outcome != Warn) {
			continue
		}
		res.Evidence = []string{"not judged: the run was interrupted while this check ran (it saw: " + strings.Join(res.Evidence, "; ") + ")"}
		res.Outcome = Skip
	}
}
