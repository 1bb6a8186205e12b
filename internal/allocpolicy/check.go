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

package allocpolicy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
)

// Limits of one container's response: those of the DeviceAllocation CRD's runtimeOptions
// (api/v1alpha1), so a recorded allocation can always be mirrored.
const (
	MaxItems             = 1024
	MaxPathLength        = 4096
	MaxEnvNameLength     = 4096
	MaxValueLength       = 32768
	MaxAnnotationKeyLen  = 317
	MaxCDIDeviceNameLen  = 4096
	MaxPermissionsLength = 3
	// MaxResponseBytes bounds one container's response as sent on the wire. A DeviceAllocation
	// holds every container of a pod and etcd takes objects of at most 1.5 MiB, while the CRD's
	// per-field limits alone would admit hundreds of MiB; 256 KiB is over a hundred times what
	// real plugins return (a few envs, mounts and device nodes).
	MaxResponseBytes = 256 << 10
)

// maxReported is the number of offending fields an Error spells out.
const maxReported = 10

// DeviceDir is the directory that device nodes must stay within, on the host and in the
// container.
const DeviceDir = "/dev"

// Error is a refused response: the resource and every offending field.
type Error struct {
	Resource string
	Errs     field.ErrorList
}

func (e *Error) Error() string {
	msgs := make([]string, 0, min(len(e.Errs), maxReported))
	for _, err := range e.Errs[:min(len(e.Errs), maxReported)] {
		msgs = append(msgs, err.Error())
	}
	more := ""
	if n := len(e.Errs) - maxReported; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return fmt.Sprintf("refusing the Allocate response of the %s device plugin: %s%s", e.Resource, strings.Join(msgs, "; "), more)
}

// Check validates the response a plugin of resource gave for one container: always its
// structure, and the rule of p that applies to resource, if any. A nil p checks the structure
// only. The error is an *Error.
func (p *Policy) Check(resource string, resp *pluginapi.ContainerAllocateResponse) error {
	var errs field.ErrorList
	if n := proto.Size(resp); n > MaxResponseBytes {
		errs = append(errs, field.TooLong(field.NewPath("response"), fmt.Sprintf("<%d bytes>", n), MaxResponseBytes))
		// Too big to go through field by field.
		return &Error{Resource: resource, Errs: errs}
	}
	errs = append(errs, checkStructure(resp)...)
	if rule := p.ruleFor(resource); rule != nil {
		errs = append(errs, rule.check(resp)...)
	}
	if len(errs) > 0 {
		return &Error{Resource: resource, Errs: errs}
	}
	return nil
}

// checkStructure checks each field of the response against the DeviceAllocation CRD's limits and
// what the runtime can take.
func checkStructure(resp *pluginapi.ContainerAllocateResponse) field.ErrorList {
	return slices.Concat(checkEnvs(resp.GetEnvs()), checkMounts(resp.GetMounts()), checkDevices(resp.GetDevices()),
		checkAnnotations(resp.GetAnnotations()), checkCDIDevices(resp.GetCdiDevices()))
}

func checkEnvs(envs map[string]string) field.ErrorList {
	path := field.NewPath("envs")
	errs := tooMany(path, len(envs))
	for _, name := range slices.Sorted(maps.Keys(envs)) {
		p := path.Key(short(name))
		switch {
		case name == "":
			errs = append(errs, field.Required(p, "an env name must not be empty"))
		case len(name) > MaxEnvNameLength:
			errs = append(errs, field.TooLong(p, "", MaxEnvNameLength))
		case strings.ContainsAny(name, "=\x00"):
			errs = append(errs, field.Invalid(p, short(name), "an env name must not hold '=' or NUL"))
		}
		errs = append(errs, checkValue(p, envs[name])...)
	}
	return errs
}

func checkMounts(mounts []*pluginapi.Mount) field.ErrorList {
	path := field.NewPath("mounts")
	errs := tooMany(path, len(mounts))
	for i, m := range mounts {
		p := path.Index(i)
		errs = append(errs, checkPath(p.Child("containerPath"), m.GetContainerPath())...)
		errs = append(errs, checkPath(p.Child("hostPath"), m.GetHostPath())...)
		if m.GetContainerPath() == "/" {
			errs = append(errs, field.Invalid(p.Child("containerPath"), "/", "a mount must not cover the container's root"))
		}
	}
	return errs
}

func checkDevices(devices []*pluginapi.DeviceSpec) field.ErrorList {
	path := field.NewPath("devices")
	errs := tooMany(path, len(devices))
	for i, d := range devices {
		p := path.Index(i)
		errs = append(errs, checkDevicePath(p.Child("containerPath"), d.GetContainerPath())...)
		errs = append(errs, checkDevicePath(p.Child("hostPath"), d.GetHostPath())...)
		if perm := d.GetPermissions(); len(perm) > MaxPermissionsLength || !validPermissions(perm) {
			errs = append(errs, field.Invalid(p.Child("permissions"), short(perm), `want a subset of "rwm"`))
		}
	}
	return errs
}

func checkAnnotations(annotations map[string]string) field.ErrorList {
	path := field.NewPath("annotations")
	errs := tooMany(path, len(annotations))
	for _, key := range slices.Sorted(maps.Keys(annotations)) {
		p := path.Key(short(key))
		if len(key) > MaxAnnotationKeyLen {
			errs = append(errs, field.TooLong(p, "", MaxAnnotationKeyLen))
		} else if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, key, strings.Join(msgs, ", ")))
		}
		errs = append(errs, checkValue(p, annotations[key])...)
	}
	return errs
}

func checkCDIDevices(devices []*pluginapi.CDIDevice) field.ErrorList {
	path := field.NewPath("cdiDevices")
	errs := tooMany(path, len(devices))
	for i, d := range devices {
		p := path.Index(i).Child("name")
		name := d.GetName()
		if len(name) > MaxCDIDeviceNameLen {
			errs = append(errs, field.TooLong(p, "", MaxCDIDeviceNameLen))
			continue
		}
		if _, _, _, err := cdiparser.ParseQualifiedName(name); err != nil {
			errs = append(errs, field.Invalid(p, short(name), err.Error()))
		}
	}
	return errs
}

func (r *ResourcePolicy) check(resp *pluginapi.ContainerAllocateResponse) field.ErrorList {
	var errs field.ErrorList
	if len(r.AllowedHostPathPrefixes) > 0 {
		allowed := func(p string) bool {
			return slices.ContainsFunc(r.AllowedHostPathPrefixes, func(prefix string) bool { return underPrefix(p, prefix) })
		}
		msg := "the allocate policy of " + r.Resource + " allows host paths under " + strings.Join(r.AllowedHostPathPrefixes, ", ") + " only"
		for i, m := range resp.GetMounts() {
			if isCleanAbs(m.GetHostPath()) && !allowed(m.GetHostPath()) {
				errs = append(errs, field.Forbidden(field.NewPath("mounts").Index(i).Child("hostPath"), short(m.GetHostPath())+": "+msg))
			}
		}
		for i, d := range resp.GetDevices() {
			if isCleanAbs(d.GetHostPath()) && !allowed(d.GetHostPath()) {
				errs = append(errs, field.Forbidden(field.NewPath("devices").Index(i).Child("hostPath"), short(d.GetHostPath())+": "+msg))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(resp.GetEnvs())) {
		if slices.Contains(r.ForbiddenEnvNames, name) {
			errs = append(errs, field.Forbidden(field.NewPath("envs").Key(name), "the allocate policy of "+r.Resource+" forbids this env"))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(resp.GetAnnotations())) {
		for _, prefix := range r.ForbiddenAnnotationPrefixes {
			if strings.HasPrefix(key, prefix) {
				errs = append(errs, field.Forbidden(field.NewPath("annotations").Key(short(key)),
					"the allocate policy of "+r.Resource+" forbids annotations starting with "+prefix))
				break
			}
		}
	}
	return errs
}

func tooMany(p *field.Path, n int) field.ErrorList {
	if n > MaxItems {
		return field.ErrorList{field.TooMany(p, n, MaxItems)}
	}
	return nil
}

func checkValue(p *field.Path, v string) field.ErrorList {
	if len(v) > MaxValueLength {
		return field.ErrorList{field.TooLong(p, "", MaxValueLength)}
	}
	return nil
}

func checkPath(p *field.Path, v string) field.ErrorList {
	switch {
	case len(v) > MaxPathLength:
		return field.ErrorList{field.TooLong(p, "", MaxPathLength)}
	case !isCleanAbs(v):
		return field.ErrorList{field.Invalid(p, short(v), "want a clean absolute path (no '.' or '..' element, no '//', no NUL)")}
	}
	return nil
}

func checkDevicePath(p *field.Path, v string) field.ErrorList {
	if errs := checkPath(p, v); len(errs) > 0 {
		return errs
	}
	if !strings.HasPrefix(v, DeviceDir+"/") || strings.HasSuffix(v, "/") {
		return field.ErrorList{field.Invalid(p, short(v), "a device node must be a path under "+DeviceDir+"/")}
	}
	return nil
}

// validPermissions reports whether s holds each of 'r', 'w' and 'm' at most once and nothing
// else; empty means the runtime's default.
func validPermissions(s string) bool {
	seen := map[rune]bool{}
	for _, c := range s {
		if !strings.ContainsRune("rwm", c) || seen[c] {
			return false
		}
		seen[c] = true
	}
	return true
}

// short cuts a value for an error message.
func short(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
