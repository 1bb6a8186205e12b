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

package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// hashLength is the number of hex digits of the hash that makes a derived name unique.
const hashLength = 10

// NodeDeviceName returns the name of shard shard of the NodeDevice for resource on node:
// <node>.<sanitized resource>-<hash>, with -<shard> appended for shards after the first. The hash
// covers the exact node and resource names, so two resources that sanitize alike never share a
// name; the result is a DNS subdomain of at most 253 characters when the node's name leaves room
// (up to 241 characters; the sanitized resource is cut to fit).
//
// The node comes first, whole, and the rest holds no dot: a node name holds no "..", so the
// node part of a name is everything before its last dot. The admission policy
// kubedevice-agent-node-restriction lets an agent create only names whose node part is its own
// node, which makes the names of one node's objects unforgeable by another node's agent.
func NodeDeviceName(node, resource string, shard int) string {
	suffix := shortHash(node + "\x00" + resource)
	if shard > 0 {
		suffix += "-" + strconv.Itoa(shard)
	}
	return nodeScopedName(node, sanitize(resource), suffix)
}

// DeviceAllocationName returns the name of the DeviceAllocation of the pod named podName with
// UID podUID on node: <node>.<pod name, dots replaced by '-', cut to fit>-<hash of the UID>.
// Retries for the same pod always name the same object, and two pods of the same name (one
// deleted, one recreated) never collide. Like NodeDeviceName's, the name starts with the whole
// node name followed by the name's only dot, which the admission policy checks.
func DeviceAllocationName(node, podName, podUID string) string {
	return nodeScopedName(node, sanitize(podName), shortHash(podUID))
}

// nodeScopedName returns node + "." + middle + "-" + suffix, with middle cut so that the whole
// fits in a DNS subdomain, and left out when there is no room for it. middle and suffix hold
// no dot.
func nodeScopedName(node, middle, suffix string) string {
	room := validation.DNS1123SubdomainMaxLength - len(node) - len(".") - len("-") - len(suffix)
	middle = strings.TrimLeft(truncateName(middle, max(room, 0)), "-")
	if middle == "" {
		return node + "." + suffix
	}
	return node + "." + middle + "-" + suffix
}

// LabelValue returns s if it is a valid label value, else a valid label value derived from it: the
// characters a label value cannot hold replaced by '_', cut to fit, with a hash of s so different
// values stay different. NodeDevices carry LabelValue(node) and LabelValue(resource) as their
// kubedevice.io/node and kubedevice.io/resource labels.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !isAlphanumeric(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '_'
		}
	}
	suffix := "-" + shortHash(s)
	prefix := strings.TrimLeft(string(b), "-_.")
	if limit := validation.LabelValueMaxLength - len(suffix); len(prefix) > limit {
		prefix = prefix[:limit]
	}
	prefix = strings.TrimRight(prefix, "-_.")
	if prefix == "" {
		return shortHash(s)
	}
	return prefix + suffix
}

// sanitize maps a resource name to lower-case letters, digits and '-'.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !isAlphanumeric(c) {
			b[i] = '-'
		}
	}
	return string(b)
}

// truncateName cuts s to at most n characters and trims the '-' and '.' that would end it, so
// that a suffix starting with '-' can follow.
func truncateName(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-.")
}

func isAlphanumeric(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLength]
}
