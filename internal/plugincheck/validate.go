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
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
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

// responseProblems are what is wrong with a ContainerAllocateResponse, by kind; repeats are the
// identical repeats, which the kubelet merges (not a problem, but said in the evidence).
type responseProblems struct {
	paths, permissions, duplicates, cdi []string
	repeats                             []string
}

// validateContainerResponse checks one container's allocation response.
func validateContainerResponse(r *v1beta1.ContainerAllocateResponse) responseProblems {
	var p responseProblems
	absolute := func(what, pth string) {
		switch {
		case pth == "":
			p.paths = append(p.paths, what+" is empty")
		case !path.IsAbs(pth):
			p.paths = append(p.paths, fmt.Sprintf("%s %q is not absolute", what, pth))
		case path.Clean(pth) != pth:
			p.paths = append(p.paths, fmt.Sprintf("%s %q is not clean (%q)", what, pth, path.Clean(pth)))
		}
	}
	targets := newTargetSet()
	for _, m := range r.GetMounts() {
		absolute("mount container path", m.GetContainerPath())
		absolute("mount host path", m.GetHostPath())
		targets.add("mount", m.GetContainerPath(), fmt.Sprintf("host path %q read-only %t", m.GetHostPath(), m.GetReadOnly()))
	}
	for _, d := range r.GetDevices() {
		absolute("device container path", d.GetContainerPath())
		absolute("device host path", d.GetHostPath())
		targets.add("device node", d.GetContainerPath(), fmt.Sprintf("host path %q permissions %q", d.GetHostPath(), d.GetPermissions()))
		if msg := validatePermissions(d.GetPermissions()); msg != "" {
			p.permissions = append(p.permissions, fmt.Sprintf("device %q: %s", d.GetContainerPath(), msg))
		}
	}
	for _, k := range sortedKeys(r.GetEnvs()) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			p.paths = append(p.paths, fmt.Sprintf("env name %q is not a variable name", k))
		}
	}
	for _, d := range r.GetCdiDevices() {
		// A CDI device is only its name: a repeat is always identical.
		targets.add("CDI device", d.GetName(), "")
		if msg := validateCDIName(d.GetName()); msg != "" {
			p.cdi = append(p.cdi, fmt.Sprintf("CDI device %q: %s", d.GetName(), msg))
		}
	}
	p.duplicates, p.repeats = targets.problems()
	return p
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

// validatePermissions checks a DeviceSpec's cgroup permissions: one or more of r, w and m, each
// once.
func validatePermissions(perm string) string {
	if perm == "" {
		return "permissions are empty (one or more of r, w, m)"
	}
	seen := map[rune]bool{}
	for _, c := range perm {
		if !strings.ContainsRune("rwm", c) {
			return fmt.Sprintf("permissions %q hold %q, not one of r, w, m", perm, c)
		}
		if seen[c] {
			return fmt.Sprintf("permissions %q repeat %q", perm, c)
		}
		seen[c] = true
	}
	return ""
}

// validateCDIName checks a fully qualified CDI device name, vendor/class=name, with the rules of
// the CDI specification (and of its reference parser, tags.cncf.io/container-device-interface
// pkg/parser): the vendor is letters, digits, '-', '_' and '.', the class letters, digits, '-'
// and '_', both starting with a letter and ending with a letter or digit; the name is letters,
// digits, '-', '_', '.' and ':', starting and ending with a letter or digit.
func validateCDIName(name string) string {
	kind, dev, ok := strings.Cut(name, "=")
	if !ok {
		return "it is not fully qualified (vendor.com/class=name): no '='"
	}
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok {
		return "it is not fully qualified (vendor.com/class=name): no '/' in the kind"
	}
	if msg := validateCDIPart("vendor", vendor, "-_.", true); msg != "" {
		return msg
	}
	if msg := validateCDIPart("class", class, "-_", true); msg != "" {
		return msg
	}
	return validateCDIPart("device name", dev, "-_.:", false)
}

func validateCDIPart(what, s, extra string, letterFirst bool) string {
	if s == "" {
		return what + " is empty"
	}
	isLetter := func(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }
	isAlnum := func(c byte) bool { return isLetter(c) || ('0' <= c && c <= '9') }
	if letterFirst && !isLetter(s[0]) {
		return fmt.Sprintf("%s %q does not start with a letter", what, s)
	}
	if !isAlnum(s[0]) {
		return fmt.Sprintf("%s %q does not start with a letter or digit", what, s)
	}
	if !isAlnum(s[len(s)-1]) {
		return fmt.Sprintf("%s %q does not end with a letter or digit", what, s)
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && !strings.ContainsRune(extra, rune(s[i])) {
			return fmt.Sprintf("%s %q holds %q", what, s, s[i])
		}
	}
	return ""
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
