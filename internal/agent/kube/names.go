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
// <node>-<sanitized resource>-<hash>, with -<shard> appended for shards after the first. The hash
// covers the exact node and resource names, so two resources that sanitize alike never share a
// name; the result is a DNS subdomain of at most 253 characters.
func NodeDeviceName(node, resource string, shard int) string {
	suffix := "-" + shortHash(node+"\x00"+resource)
	if shard > 0 {
		suffix += "-" + strconv.Itoa(shard)
	}
	return truncateName(node+"-"+sanitize(resource), validation.DNS1123SubdomainMaxLength-len(suffix)) + suffix
}

// DeviceAllocationName returns the name of the DeviceAllocation of the pod named podName with
// UID podUID: the pod name, truncated if need be, and a hash of the UID. Retries for the same pod
// always name the same object, and two pods of the same name (one deleted, one recreated) never
// collide.
func DeviceAllocationName(podName, podUID string) string {
	suffix := "-" + shortHash(podUID)
	return truncateName(podName, validation.DNS1123SubdomainMaxLength-len(suffix)) + suffix
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
