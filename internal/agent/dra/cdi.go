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
	"fmt"
	"maps"
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// CDI vendor and class of the specs the agent writes: CDI device IDs are
// kubedevice.io/device=<claim UID>-<n>.
const (
	cdiVendor = "kubedevice.io"
	cdiClass  = "device"
	cdiKind   = cdiVendor + "/" + cdiClass
)

// DefaultCDIDir is where containerd and CRI-O look for CDI specs by default.
const DefaultCDIDir = "/var/run/cdi"

// cdiWriter writes and removes the per-claim CDI spec files.
type cdiWriter struct {
	cache *cdiapi.Cache
}

func newCDIWriter(dir string) (*cdiWriter, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("opening the CDI spec directory %s: %w", dir, err)
	}
	return &cdiWriter{cache: cache}, nil
}

// specName is the file name (without extension) of a claim's spec.
func specName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(cdiVendor, cdiClass, claimUID) + ".json"
}

// cdiDeviceName names the CDI device of the i-th request and resource of a claim.
func cdiDeviceName(claimUID string, i int) string { return fmt.Sprintf("%s-%d", claimUID, i) }

// claimSpec turns a prepared claim into one CDI spec: one CDI device per request and resource,
// carrying that Allocate response's envs, device nodes and mounts. It returns the spec and, per
// entry of alloc.Resources, the CDI device IDs a container using those devices gets: the spec's
// device, then the CDI devices the plugin returned itself.
//
// Annotations of the response have no CDI equivalent and are dropped (dropped lists them): the
// kubelet passes only CDI device IDs of a DRA claim to the runtime.
func claimSpec(alloc nodeagent.ClaimAllocation) (spec *cdispec.Spec, ids [][]string, dropped map[string]string) {
	spec = &cdispec.Spec{Kind: cdiKind}
	for i, ra := range alloc.Resources {
		resp := ra.Response
		name := cdiDeviceName(alloc.Claim.UID, i)
		dev := cdispec.Device{Name: name, ContainerEdits: containerEdits(resp)}
		spec.Devices = append(spec.Devices, dev)
		devIDs := []string{cdiparser.QualifiedName(cdiVendor, cdiClass, name)}
		for _, c := range resp.GetCdiDevices() {
			if c.GetName() != "" && !slices.Contains(devIDs, c.GetName()) {
				devIDs = append(devIDs, c.GetName())
			}
		}
		ids = append(ids, devIDs)
		for k, v := range resp.GetAnnotations() {
			if dropped == nil {
				dropped = map[string]string{}
			}
			dropped[k] = v
		}
	}
	if v, err := cdispec.MinimumRequiredVersion(spec); err == nil {
		spec.Version = v
	} else {
		spec.Version = cdispec.CurrentVersion
	}
	return spec, ids, dropped
}

// containerEdits converts an Allocate response as the kubelet turns it into a container's run
// options: envs, device nodes (container path, host path, cgroup permissions) and bind mounts.
func containerEdits(resp *pluginapi.ContainerAllocateResponse) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	for _, k := range slices.Sorted(maps.Keys(resp.GetEnvs())) {
		e.Env = append(e.Env, k+"="+resp.GetEnvs()[k])
	}
	for _, d := range resp.GetDevices() {
		perms := d.GetPermissions()
		if perms == "" {
			perms = "rwm"
		}
		e.DeviceNodes = append(e.DeviceNodes, &cdispec.DeviceNode{Path: d.GetContainerPath(), HostPath: d.GetHostPath(), Permissions: perms})
	}
	for _, m := range resp.GetMounts() {
		mode := "rw"
		if m.GetReadOnly() {
			mode = "ro"
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.GetHostPath(), ContainerPath: m.GetContainerPath(), Options: []string{"rbind", "rprivate", mode}})
	}
	return e
}

// write writes the claim's spec (atomically: a temporary file renamed).
func (w *cdiWriter) write(claimUID string, spec *cdispec.Spec) error {
	if err := w.cache.WriteSpec(spec, specName(claimUID)); err != nil {
		return fmt.Errorf("writing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// remove removes the claim's spec; a missing one is not an error.
func (w *cdiWriter) remove(claimUID string) error {
	if err := w.cache.RemoveSpec(specName(claimUID)); err != nil {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}
