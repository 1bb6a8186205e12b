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

// Package allocpolicy checks what a device plugin's Allocate answers before the node agent
// records it and hands it to the container runtime.
//
// The kubelet trusts device plugins: whatever a plugin's ContainerAllocateResponse says (envs,
// mounts, device nodes, annotations, CDI devices) goes into the container as it is. kubedevice
// keeps that trust model for what a response means, and refuses what is malformed:
//
//   - always (Check with a nil or empty Policy): the structure. Mount and device paths are
//     absolute and clean (no "." or ".." element, no doubled slash, no NUL), device nodes stay
//     within /dev on both sides (so /dev/../dev/sda or /proc/1/root are refused, not cleaned),
//     device permissions are a subset of "rwm", env names are not empty and hold no '=' or NUL,
//     annotation keys are qualified names as Kubernetes annotations are, CDI device names parse
//     as fully qualified names by the CDI specification's own parser
//     (tags.cncf.io/container-device-interface/pkg/parser), and every count and length is within
//     what the DeviceAllocation CRD accepts, the whole response within MaxResponseBytes, so an
//     allocation that was recorded can always be mirrored.
//   - opt in, per resource (a Policy the administrator writes, loaded by Load): host path
//     prefixes that mounts and device nodes must stay within, env names a plugin may not set
//     (LD_PRELOAD), and annotation prefixes it may not set (org.systemd.property., cdi.k8s.io/).
//
// A refusal is an *Error naming the resource and every offending field; the core fails the
// allocation with it (reason AllocateFailed), which the agent reports as the DeviceAllocation's
// Allocated=False condition and a Warning event on the pod.
package allocpolicy
