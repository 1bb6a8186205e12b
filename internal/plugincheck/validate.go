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
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/allocpolicy"
)

// The prefixes of the kubelet's extended resource name rule.
const (
	nativeResourceDomain = "kubernetes.io/"
	requestsPrefix       = "requests."
	// maxDeviceIDLength is the API's limit on Device.ID ("Max length of this field is 63
	// characters"); the kubelet does not enforce it.
	maxDeviceIDLength = 63
)

// validateResourceName applies the kubelet's v1helper.IsExtendedResourceName, with which its
// Register rejects a plugin: a domain-prefixed name outside *kubernetes.io/, not starting with
// "requests.", such that "requests.<name>" is a qualified name. It returns what is wrong.
func validateResourceName(name string) []string {
	switch {
	case !strings.Contains(name, "/"):
		return []string{"it has no domain prefix"}
	case strings.Contains(name, nativeResourceDomain):
		return []string{"it is in the " + nativeResourceDomain + " domain, reserved for native resources"}
	case strings.HasPrefix(name, requestsPrefix):
		return []string{"it starts with " + requestsPrefix}
	}
	return validation.IsQualifiedName(requestsPrefix + name)
}

// validateEndpoint says what is wrong with a RegisterRequest.Endpoint, which the kubelet joins to
// its socket directory without looking at it: it must name a file directly in the directory.
func validateEndpoint(endpoint string) []string {
	switch {
	case endpoint == "":
		return []string{"it is empty"}
	case strings.ContainsRune(endpoint, '/') || strings.ContainsRune(endpoint, filepath.Separator):
		return []string{"it is not a plain file name (it holds a path separator), so the socket is not in the plugin directory"}
	case endpoint == "." || endpoint == "..":
		return []string{"it names a directory"}
	case endpoint == kubeletSocketName:
		return []string{"it is the device manager's own socket"}
	}
	return nil
}

// validateDevices says what is wrong with a ListAndWatch device list's IDs.
func validateDeviceIDs(devs []*v1beta1.Device) []string {
	var problems []string
	seen := map[string]int{}
	for i, d := range devs {
		id := d.GetID()
		switch {
		case id == "":
			problems = append(problems, fmt.Sprintf("device %d has an empty ID", i))
		case len(id) > maxDeviceIDLength:
			problems = append(problems, fmt.Sprintf("ID %q is %d characters long, more than %d", id, len(id), maxDeviceIDLength))
		}
		seen[id]++
	}
	for _, id := range sortedKeys(seen) {
		if n := seen[id]; n > 1 && id != "" {
			problems = append(problems, fmt.Sprintf("ID %q is listed %d times", id, n))
		}
	}
	return problems
}

// validateHealth says which devices have a health other than Healthy or Unhealthy.
func validateHealth(devs []*v1beta1.Device) []string {
	var problems []string
	for _, d := range devs {
		if h := d.GetHealth(); h != v1beta1.Healthy && h != v1beta1.Unhealthy {
			problems = append(problems, fmt.Sprintf("device %q has health %q", d.GetID(), h))
		}
		for _, n := range d.GetTopology().GetNodes() {
			if n.GetID() < 0 {
				problems = append(problems, fmt.Sprintf("device %q has NUMA node %d", d.GetID(), n.GetID()))
			}
		}
	}
	return problems
}

// responseProblems are what is wrong with a ContainerAllocateResponse, by check; repeats are the
// identical repeats, which the kubelet merges (not a problem, but said in the evidence), and
// warnings what fails only with --strict.
type responseProblems struct {
	paths, permissions, duplicates, cdi []string
	repeats, warnings                   []string
}

// Whose rule a refusal of the agent's is: the kubelet's (it passes the value on to the container
// runtime, which refuses it) or kubedevice's stricter trust model (the agent refuses an
// allocation the kubelet would make; stricter fills in the rule).
const (
	kubeletRule  = "kubelet: it passes this to the container runtime as it is, and the runtime refuses it"
	stricterRule = "kubedevice's stricter trust model: %s; the agent refuses the allocation, the kubelet would make it"
)

// validateContainerResponse checks one container's allocation response of resource with the
// agent's own check (allocpolicy, the structure every agent enforces, whatever the cluster's
// allocate policy), so that a plugin the checker passes is never refused by the agent; each
// refusal says whose rule it is. Conflicting duplicates are the checker's own (the kubelet keeps
// one), and so are empty permissions (a warning: the API asks for one or more of r, w, m; the
// kubelet and the agent pass them on and the runtime's default applies).
func validateContainerResponse(resource string, r *v1beta1.ContainerAllocateResponse) responseProblems {
	var p responseProblems
	var refused *allocpolicy.Error
	if err := (*allocpolicy.Policy)(nil).Check(resource, r); errors.As(err, &refused) {
		for _, e := range refused.Errs {
			msg := fmt.Sprintf("%s (%s)", e.Error(), ruleOf(e))
			switch {
			case strings.HasPrefix(e.Field, "cdiDevices"):
				p.cdi = append(p.cdi, msg)
			case strings.HasSuffix(e.Field, ".permissions"):
				p.permissions = append(p.permissions, msg)
			default:
				p.paths = append(p.paths, msg)
			}
		}
	}
	targets := newTargetSet()
	for _, m := range r.GetMounts() {
		targets.add("mount", m.GetContainerPath(), fmt.Sprintf("host path %q read-only %t", m.GetHostPath(), m.GetReadOnly()))
	}
	for _, d := range r.GetDevices() {
		targets.add("device node", d.GetContainerPath(), fmt.Sprintf("host path %q permissions %q", d.GetHostPath(), d.GetPermissions()))
		if d.GetPermissions() == "" {
			p.warnings = append(p.warnings, fmt.Sprintf("device %q has no permissions: the API asks for one or more of r, w, m; the kubelet and the agent pass none on, and the runtime's default applies", d.GetContainerPath()))
		}
	}
	for _, d := range r.GetCdiDevices() {
		// A CDI device is only its name: a repeat is always identical.
		targets.add("CDI device", d.GetName(), "")
	}
	p.duplicates, p.repeats = targets.problems()
	return p
}

// ruleOf says whose rule the agent's refusal e is (kubeletRule or stricterRule).
func ruleOf(e *field.Error) string {
	value, _ := e.BadValue.(string)
	switch {
	case e.Type == field.ErrorTypeTooLong || e.Type == field.ErrorTypeTooMany:
		return fmt.Sprintf(stricterRule, "within the limits of the DeviceAllocation object that records it")
	case strings.HasPrefix(e.Field, "annotations"):
		return fmt.Sprintf(stricterRule, "annotation keys are qualified names, as Kubernetes annotations are")
	case strings.HasPrefix(e.Field, "devices[") && path.IsAbs(value) && path.Clean(value) == value:
		return fmt.Sprintf(stricterRule, "device nodes stay under "+allocpolicy.DeviceDir+"/ on both sides")
	case strings.HasPrefix(e.Field, "mounts[") && value == "/":
		return fmt.Sprintf(stricterRule, "no mount covers the container's root")
	case strings.HasSuffix(e.Field, "Path") && path.IsAbs(value):
		return fmt.Sprintf(stricterRule, "paths are clean, with no '.' or '..' element and no '//'")
	}
	return kubeletRule
}

// targetSet collects what a response puts at each container path (or CDI name), to tell
// conflicting duplicates from identical repeats.
type targetSet struct {
	order []string
	specs map[string][]string
}

func newTargetSet() *targetSet { return &targetSet{specs: map[string][]string{}} }

func (t *targetSet) add(kind, at, spec string) {
	key := fmt.Sprintf("%s %q", kind, at)
	if _, ok := t.specs[key]; !ok {
		t.order = append(t.order, key)
	}
	t.specs[key] = append(t.specs[key], spec)
}

// problems returns the conflicts (one container path, different host paths, permissions or
// read-only flags: the kubelet keeps the first it meets, in random order across resources, and
// only logs the others) and the identical repeats (the kubelet merges them).
func (t *targetSet) problems() (conflicts, repeats []string) {
	for _, key := range t.order {
		specs := t.specs[key]
		if len(specs) < 2 {
			continue
		}
		distinct := uniq(specs)
		if len(distinct) == 1 {
			repeats = append(repeats, fmt.Sprintf("%s is listed %d times, identically", key, len(specs)))
			continue
		}
		conflicts = append(conflicts, fmt.Sprintf("%s is listed %d times with different settings (%s): the kubelet keeps one and drops the others",
			key, len(specs), strings.Join(distinct, "; ")))
	}
	return conflicts, repeats
}

// validatePreferred checks a preferred allocation against its request, by kind.
func validatePreferred(req *v1beta1.ContainerPreferredAllocationRequest, got []string) (mustInclude, size, available []string) {
	for _, id := range req.GetMustIncludeDeviceIDs() {
		if !slices.Contains(got, id) {
			mustInclude = append(mustInclude, fmt.Sprintf("%q must be included but is not", id))
		}
	}
	if want := int(req.GetAllocationSize()); len(got) != want {
		size = append(size, fmt.Sprintf("%d devices answered for allocation_size %d", len(got), want))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if !slices.Contains(req.GetAvailableDeviceIDs(), id) {
			available = append(available, fmt.Sprintf("%q is not among the available devices", id))
		}
		if seen[id] {
			size = append(size, fmt.Sprintf("%q is answered twice", id))
		}
		seen[id] = true
	}
	return mustInclude, size, available
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
