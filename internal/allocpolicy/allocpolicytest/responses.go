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

// Package allocpolicytest holds real Allocate responses and the path an accepted response takes
// into the core's runtime options, for the fuzz targets of the packages that translate those
// options (the DeviceAllocation status, the NRI adjustment).
package allocpolicytest

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/allocpolicy"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// Responses are container responses as real plugins send them: the gopher plugin's (an env and
// read-only mounts), the kubelet stub's (envs and device nodes), and one with every field.
func Responses() []*pluginapi.ContainerAllocateResponse {
	return []*pluginapi.ContainerAllocateResponse{
		{
			Envs: map[string]string{"GOPHER": "gopher-0,gopher-1"},
			Mounts: []*pluginapi.Mount{
				{ContainerPath: "/gophers/gopher-0", HostPath: "/var/lib/gopher/gopher-0", ReadOnly: true},
				{ContainerPath: "/gophers/gopher-1", HostPath: "/var/lib/gopher/gopher-1", ReadOnly: true},
			},
		},
		{
			Envs: map[string]string{"STUB_dev-0": "dev-0", "STUB_dev-1": "dev-1"},
			Devices: []*pluginapi.DeviceSpec{
				{ContainerPath: "/dev/dev-0", HostPath: "/dev/null", Permissions: "rw"},
				{ContainerPath: "/dev/dev-1", HostPath: "/dev/null", Permissions: "rw"},
			},
		},
		{
			Envs:        map[string]string{"NVIDIA_VISIBLE_DEVICES": "0"},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/lib/driver", HostPath: "/opt/driver/lib"}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/accel0", HostPath: "/dev/accel0", Permissions: "rwm"}, {ContainerPath: "/dev/b", HostPath: "/dev/b"}},
			Annotations: map[string]string{"vendor.com/device": "accel0"},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/accel=0"}},
		},
	}
}

// Seeds returns Responses marshalled, as a fuzz corpus.
func Seeds() [][]byte {
	var out [][]byte
	for _, r := range Responses() {
		b, err := proto.Marshal(r)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}

// Options decodes msg as a plugin's container response and, when it decodes and the structural
// check accepts it, records it as the core does (committed for a container in a fresh Store) and
// returns the container's merged runtime options. ok is false for a response the wire or the
// check refuses; err is a failure to record an accepted response.
func Options(msg []byte) (opts *poddevices.RunContainerOptions, ok bool, err error) {
	var resp pluginapi.ContainerAllocateResponse
	if proto.Unmarshal(msg, &resp) != nil {
		return nil, false, nil
	}
	if (*allocpolicy.Policy)(nil).Check("example.com/dev", &resp) != nil {
		return nil, false, nil
	}
	s := poddevices.New()
	pod := poddevices.PodRef{UID: "uid", Namespace: "ns", Name: "pod"}
	if err := s.Reserve(pod.UID, "c", "example.com/dev", "d0"); err != nil {
		return nil, true, err
	}
	if err := s.Commit(pod, "c", "example.com/dev", map[int64][]string{0: {"d0"}}, &resp); err != nil {
		return nil, true, fmt.Errorf("committing an accepted response: %w", err)
	}
	// A response that sets one key twice conflicts with itself; the first setting wins, as
	// between resources.
	opts, _ = s.RunContainerOptions(pod.UID, "c")
	return opts, true, nil
}
