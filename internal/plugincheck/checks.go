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
	"fmt"
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
		"The plugin calls Register on <plugin dir>/kubelet.sock, serving its DevicePlugin service first: the kubelet dials the endpoint back and calls GetDevicePluginOptions inside Register and rejects the registration when that fails (kubelet plugin/v1beta1/server.go Register -> connectClient, \"failed to get device plugin options\"). Or it registers through the kubelet's plugin watcher: a socket in the plugins registry directory answering GetInfo with type DevicePlugin, and the kubelet registers it the same way (pkg/kubelet/pluginmanager; plugin/v1beta1/handler.go ValidatePlugin and RegisterPlugin). Each resource a plugin process registers is checked on its own."}
	CheckVersion = Check{"registration/version",
		"RegisterRequest.version is \"v1beta1\", the only entry of SupportedVersions (kubelet server.go isVersionCompatibleWithPlugin; else \"requested API version %q is not supported by kubelet\"); through the plugin watcher, GetInfo's supported_versions hold it (handler.go ValidatePlugin)."}
	CheckResourceName = Check{"registration/resource-name",
		"RegisterRequest.resource_name is an extended resource name: domain-prefixed, outside *kubernetes.io/, and \"requests.<name>\" a qualified name (kubelet v1helper.IsExtendedResourceName; else \"the ResourceName %q is invalid\")."}
	CheckEndpoint = Check{"registration/endpoint",
		"RegisterRequest.endpoint is the file name of a unix socket in the plugin directory (API: \"PATH = path.Join(DevicePluginPath, endpoint)\"; the kubelet joins it to its socket directory unchecked and dials it). Through the plugin watcher, GetInfo's endpoint is the absolute path of a unix socket (empty: the registry socket itself), which the kubelet dials as it is."}
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
		"The response is judged by the kubedevice agent's own check of every Allocate response (internal/allocpolicy, one implementation with two callers), and each refusal says whose rule it is. The kubelet's: paths are absolute and env names are variable names (no '=' or NUL), as the kubelet passes them to the runtime as they are (kubelet pod_devices.go deviceRunContainerOptions) and the runtime refuses the rest. kubedevice's stricter trust model, which makes the agent refuse an allocation the kubelet would make: device nodes stay under /dev/ on both sides, paths are clean (no '.' or '..' element, no '//'), no mount covers the container's root, annotation keys are qualified names, and counts and lengths fit the DeviceAllocation object (1024 items, 4096-byte paths, 256 KiB a response)."}
	CheckPermissions = Check{"allocate/permissions",
		"DeviceSpec.permissions are a subset of r, w, m, each once (API DeviceSpec: \"Cgroups permissions of the device, candidates are one or more of r, w, m\"; the agent's check, and the runtime, refuse others). Empty permissions are a warning: the API asks for one or more, while the kubelet and the agent pass none on and the runtime's default applies."}
	CheckDuplicates = Check{"allocate/duplicates",
		"A container response puts one thing at each container path: the kubelet keys mounts and device nodes by container path and keeps the first it meets (in random order across resources), only logging a different host path or permissions (kubelet pod_devices.go deviceRunContainerOptions), so a conflict fails. Identical repeats (one device node shared by several device IDs) and repeated CDI names are merged and pass."}
	CheckCDINames = Check{"allocate/cdi-names",
		"CDI device names are fully qualified, vendor.com/class=name, as the CDI specification's own parser reads them (API CDIDevice.name: \"Fully qualified CDI device name\"; the agent's check uses tags.cncf.io/container-device-interface/pkg/parser, and the runtime cannot resolve others)."}
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
		"After the kubelet restarts (it removes every socket in the plugin directory, CleanupPluginDirectory, and creates kubelet.sock again; its plugin watcher registers the sockets of the plugins registry again), the plugin registers each of its resources again and serves ListAndWatch within the stated time (30 s by default: the kubelet's e2e tests expect capacity back within 30 s of a kubelet restart). Each resource is matched by its name."}
	CheckStop = Check{"stop/socket-removed",
		"On SIGTERM the plugin exits within the stated time (10 s by default) and removes each resource's socket: a socket left behind looks like a live plugin (the plugin watcher deregisters a plugin when its socket is deleted; the kubelet removes stale sockets only when it starts)."}
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
	Check Check
	// Resource is the resource the check judged: a plugin process may serve several, each
	// checked on its own. "" when it is not known (a socket given, or nothing registered).
	Resource string
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
	// Resources are the resource names the plugin registered, sorted: each has its own section
	// of results.
	Resources []string
	Results   []Result
	Duration  time.Duration
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

// Result returns the first result of the check with that ID, and whether there is one.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.Check.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// ResultFor returns the result of the check with that ID for resource, and whether there is one.
func (r *Report) ResultFor(resource, id string) (Result, bool) {
	for _, res := range r.Results {
		if res.Resource == resource && res.Check.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Sections returns the results by resource, in the order of Resources (results of no known
// resource first).
func (r *Report) Sections() (resources []string, results [][]Result) {
	for _, res := range r.Results {
		i := slices.Index(resources, res.Resource)
		if i < 0 {
			resources, results = append(resources, res.Resource), append(results, nil)
			i = len(resources) - 1
		}
		results[i] = append(results[i], res)
	}
	return resources, results
}

// sortResults puts the results by resource (in the order of Resources), each in the order of
// AllChecks: some checks are judged over the whole run (list-and-watch/health-update and
// stream-open, before and after the kubelet restart) and end after checks listed later.
func (r *Report) sortResults() {
	index := func(res Result) int {
		return slices.IndexFunc(AllChecks, func(c Check) bool { return c.ID == res.Check.ID })
	}
	slices.SortStableFunc(r.Results, func(a, b Result) int {
		if a.Resource != b.Resource {
			return slices.Index(r.Resources, a.Resource) - slices.Index(r.Resources, b.Resource)
		}
		return index(a) - index(b)
	})
}

// describeResources says how many resources the plugin registered, and which.
func (r *Report) describeResources() string {
	switch len(r.Resources) {
	case 0:
		return "no resource registered"
	case 1:
		return "1 resource (" + r.Resources[0] + ")"
	}
	return fmt.Sprintf("%d resources (%s)", len(r.Resources), strings.Join(r.Resources, ", "))
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
