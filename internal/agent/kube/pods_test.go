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
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

func TestRuntimeUID(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "api-uid"}}
	if got := RuntimeUID(pod); got != "api-uid" {
		t.Errorf("pod: got %q", got)
	}
	pod.Annotations = map[string]string{MirrorPodAnnotation: "config-hash"}
	if got := RuntimeUID(pod); got != "config-hash" {
		t.Errorf("mirror pod: got %q, want the static pod's UID", got)
	}
}

func TestPodPhaseOrDeletionChanged(t *testing.T) {
	pod := func(phase corev1.PodPhase, deleting bool, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	cases := map[string]struct {
		old, new *corev1.Pod
		want     bool
	}{
		"phase changed":            {pod(corev1.PodPending, false, nil), pod(corev1.PodRunning, false, nil), true},
		"deletion started":         {pod(corev1.PodRunning, false, nil), pod(corev1.PodRunning, true, nil), true},
		"only labels changed":      {pod(corev1.PodRunning, false, nil), pod(corev1.PodRunning, false, map[string]string{"a": "b"}), false},
		"nothing that matters":     {pod(corev1.PodRunning, true, nil), pod(corev1.PodRunning, true, nil), false},
		"not a pod is let through": {nil, nil, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := event.UpdateEvent{}
			if tc.old != nil {
				e.ObjectOld, e.ObjectNew = tc.old, tc.new
			} else {
				e.ObjectOld, e.ObjectNew = &corev1.Node{}, &corev1.Node{}
			}
			if got := PodPhaseOrDeletionChanged(e); got != tc.want {
				t.Errorf("PodPhaseOrDeletionChanged = %v, want %v", got, tc.want)
			}
		})
	}
	got := PodOfDeviceAllocation(context.Background(), &kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n1.da"}, Spec: kdv1alpha1.DeviceAllocationSpec{PodName: "p"},
	})
	if len(got) != 1 || got[0].Namespace != "ns" || got[0].Name != "p" {
		t.Errorf("PodOfDeviceAllocation = %v, want ns/p", got)
	}
	if got := PodOfDeviceAllocation(context.Background(), &corev1.Pod{}); got != nil {
		t.Errorf("PodOfDeviceAllocation(a pod) = %v, want nothing", got)
	}
}
