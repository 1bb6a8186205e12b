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

package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// Namespace is where both installs (the Helm chart and config/default) put the agent and the
// controller: the agents' Leases and the controller's leader election Lease live there. The
// binaries take it from $POD_NAMESPACE or a flag; this is the default when neither says.
const Namespace = "kubedevice-system"

// Field owners: each binary writes under its own field manager, so none ever takes another's
// fields.
const (
	// AgentFieldOwner is the field manager of every write of the node agent, and the reporting
	// controller of its events.
	AgentFieldOwner = "kubedevice-agent"

	// ControllerFieldOwner is the field manager of every write of the controller, and the
	// reporting controller of its events.
	ControllerFieldOwner = "kubedevice-controller"

	// ControllerNodeCapacityFieldOwner is the field manager under which the controller's
	// node-capacity reconciler applies the NodeCapacityPublished condition of NodeDevices. A field
	// manager has one applied set per object, and the controller's NodeDevice reconciler applies
	// AgentReady under ControllerFieldOwner: were both applied under one name, each apply would
	// remove the other's condition.
	ControllerNodeCapacityFieldOwner = "kubedevice-controller-node-capacity"

	// CleanupFieldOwner is the field manager of `kubedevice cleanup`'s writes.
	CleanupFieldOwner = "kubedevice-cleanup"
)

// AgentLeasePrefix prefixes the node name in the name of the Lease each node agent renews in
// Namespace: kubedevice-agent-<node>. The controller judges the agent alive from it.
const AgentLeasePrefix = "kubedevice-agent-"

// AgentLeaseName returns the name of the Lease the agent of node renews.
func AgentLeaseName(node string) string {
	return AgentLeasePrefix + node
}

// AgentReadyCondition is the AgentReady condition of a NodeDevice at generation while the agent of
// node renews its Lease in namespace. The controller writes it (and False once the Lease expires);
// the agent seeds it on a NodeDevice whose status it writes for the first time, so a new shard does
// not cost the controller a write of an object of up to 128 devices to say what the agent's own
// write already shows. Both must write the same reason and message, or each would rewrite the
// other's.
func AgentReadyCondition(namespace, node string, generation int64) metav1.Condition {
	return metav1.Condition{
		Type:               kdv1alpha1.NodeDeviceAgentReady,
		Status:             metav1.ConditionTrue,
		Reason:             kdv1alpha1.ReasonAgentLeaseValid,
		Message:            fmt.Sprintf("The node agent renews its Lease %s/%s.", namespace, AgentLeaseName(node)),
		ObservedGeneration: generation,
	}
}

// LeaderElectionID names the Lease the controller replicas elect a leader with, in the
// controller's namespace. While a controller holds it, it may publish node capacity at any
// moment; `kubedevice cleanup` waits until it is released or expired.
const LeaderElectionID = "kubedevice-controller.kubedevice.io"

// NodeCapacityFinalizer holds a NodeDevice until the controller has set its resource to zero on
// the node, so a resource whose NodeDevices are all gone is never left published (nor forgotten
// as ours), even when the controller was down when they went. `kubedevice cleanup` removes it.
const NodeCapacityFinalizer = "kubedevice.io/node-capacity"

// WithTransitionTime returns c with the transition time of got (the condition the object has,
// nil when none) when the status did not change, now otherwise.
func WithTransitionTime(c metav1.Condition, got *metav1.Condition, now metav1.Time) metav1.Condition {
	c.LastTransitionTime = now
	if got != nil && got.Status == c.Status {
		c.LastTransitionTime = got.LastTransitionTime
	}
	return c
}

// StripNode is a cache transform for Nodes: it drops what neither the agent nor the controller
// reads, managed fields and the image list (the bulk of a Node object).
func StripNode(in any) (any, error) {
	if node, ok := in.(*corev1.Node); ok {
		node.ManagedFields = nil
		node.Status.Images = nil
	}
	return in, nil
}

// CompactNodeDevice is a cache transform for NodeDevices: it drops managed fields (nothing reads
// them) and makes each device's health, reason and message, which repeat across the devices of a
// node and of a cluster ("Healthy", "ReportedHealthy", ...), share one copy of each distinct
// string instead of one per device as decoding makes them: about 90 bytes a device in the agent's
// cache and in the controller's, which holds every node's.
func CompactNodeDevice(in any) (any, error) {
	nd, ok := in.(*kdv1alpha1.NodeDevice)
	if !ok {
		return in, nil
	}
	nd.ManagedFields = nil
	for i := range nd.Status.Devices {
		d := &nd.Status.Devices[i]
		d.Health = unique.Make(d.Health).Value()
		d.Reason = unique.Make(d.Reason).Value()
		d.Message = unique.Make(d.Message).Value()
	}
	return nd, nil
}

// The DRA driver the agent is for the resources it serves through DRA, and the device attributes
// it publishes in ResourceSlices: the controller's DeviceClasses select devices by them.
const (
	// DRADriverName is the driver name in kubedevice's ResourceSlices and ResourceClaim results.
	DRADriverName = "kubedevice.io"

	// DRAAttributeResourceName is the device attribute (in the driver's domain, so
	// kubedevice.io/resourceName) holding the device plugin's resource name.
	DRAAttributeResourceName = "resourceName"

	// DRAAttributeDeviceID is the device attribute (kubedevice.io/deviceID) holding the device ID
	// exactly as the device plugin names it.
	DRAAttributeDeviceID = "deviceID"
)

// ManagedByLabel and ManagedByValue mark the cluster-scoped objects kubedevice's controller
// creates and owns outside its own API group (DeviceClasses); cleanup deletes what carries them.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "kubedevice"
)

// DeviceClassResourceAnnotation on a DeviceClass kubedevice manages names the resource it serves.
const DeviceClassResourceAnnotation = "kubedevice.io/resource-name"

// LabelHashLength is the number of hex digits (40 bits) of the SHA-256 suffix HashedLabel appends.
const LabelHashLength = 10

// HashedLabel maps s to a DNS label of at most max characters, deterministically: s lower-cased,
// every character outside [a-z0-9] a '-', '-' trimmed from both ends, cut to leave room for '-' and
// the first LabelHashLength hex digits of the SHA-256 of s, which are appended ("d-<hash>" when
// nothing of s is left). Two strings map to one label only through a hash collision. The DRA
// flow names devices and pools with it, the controller its DeviceClasses.
func HashedLabel(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	if keep := max - 1 - LabelHashLength; len(base) > keep {
		base = strings.TrimRight(base[:keep], "-")
	}
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:])[:LabelHashLength]
	if base == "" {
		return "d-" + suffix
	}
	return base + "-" + suffix
}
