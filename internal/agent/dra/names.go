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
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubedevice/kubedevice/internal/contract"
)

// hashLen is the number of hex digits of the SHA-256 suffix of a mapped name (40 bits).
const hashLen = contract.LabelHashLength

// DeviceName maps a plugin's device ID to a DRA device name, a DNS label (at most 63 characters,
// lowercase alphanumerics and '-', starting and ending with an alphanumeric):
//
//   - an ID that is a DNS label already is its own name;
//   - any other ID is lowercased, every character other than [a-z0-9] becomes '-', leading and
//     trailing '-' are dropped, the result is cut to 52 characters (and trailing '-' dropped
//     again), and "-" plus the first 10 hex digits of the SHA-256 of the ID are appended.
//
// The mapping is deterministic (the same ID gives the same name on every agent and after every
// restart) and an ID that was changed always carries the hash of its original spelling, so "GPU-0"
// and "gpu_0" get different names. A name that still collides with another device's of the same
// pool (an ID that is a DNS label and ends in exactly another ID's suffix) is detected when the
// slices are built, and both devices are left out (see poolOf).
func DeviceName(id string) string {
	if validation.IsDNS1123Label(id) == nil {
		return id
	}
	return contract.HashedLabel(id, validation.DNS1123LabelMaxLength)
}

// PoolName maps a resource name to the name of its pool: the resource name itself when it is a
// valid pool name (DNS subdomains separated by '/', at most 253 characters: example.com/gopher is),
// otherwise its DeviceName-style label with a hash suffix.
func PoolName(resource string) string {
	ok := len(resource) <= validation.DNS1123SubdomainMaxLength
	for _, part := range strings.Split(resource, "/") {
		ok = ok && validation.IsDNS1123Subdomain(part) == nil
	}
	if ok {
		return resource
	}
	return contract.HashedLabel(resource, validation.DNS1123LabelMaxLength)
}
