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

package mirror

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// maxEventNote is the longest note the events.k8s.io API accepts.
const maxEventNote = 1024

// rejectionEvents reports the core's refusal of a plugin's ListAndWatch message
// (ResourceSnapshot.Rejected) with a Warning Event on the resource's first NodeDevice, beside its
// Healthy=False DeviceListRejected condition: once per distinct refusal, not per message, so a
// plugin that sends the same bad list again and again makes one Event. A refusal that comes back
// after an accepted list is reported again. Only the mirror's single reconcile worker uses it.
type rejectionEvents struct {
	recorder recorder.EventRecorder
	// reported is the refusal last reported per resource (reason and message).
	reported map[string]string
}

func newRejectionEvents(rec recorder.EventRecorder) *rejectionEvents {
	return &rejectionEvents{recorder: rec, reported: map[string]string{}}
}

// report emits the Event for snap's refusal unless it was already reported. keep are the
// resource's shards; the Event is about the first, once it exists (a shard the reconcile has just
// created is reported on by the reconcile its creation triggers).
func (e *rejectionEvents) report(snap nodeagent.ResourceSnapshot, keep []shardPlan) {
	if snap.Rejected == nil {
		e.forget(snap.ResourceName)
		return
	}
	key := snap.Rejected.Reason + "\x00" + snap.Rejected.Message
	if e.recorder == nil || len(keep) == 0 || keep[0].current == nil || e.reported[snap.ResourceName] == key {
		return
	}
	e.reported[snap.ResourceName] = key
	note := kube.Truncate(fmt.Sprintf("The agent refused the device plugin's device list for %s (%s): %s",
		snap.ResourceName, snap.Rejected.Reason, snap.Rejected.Message), maxEventNote)
	e.recorder.Eventf(keep[0].current, nil, corev1.EventTypeWarning, kdv1alpha1.ReasonDeviceListRejected,
		kube.EventAction("AcceptDeviceList", note), "%s", note)
}

// forget drops what was reported for resource: its plugin's list was accepted, or the resource
// is gone.
func (e *rejectionEvents) forget(resource string) { delete(e.reported, resource) }
