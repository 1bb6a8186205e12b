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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWithTransitionTime(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	c := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R"}
	for _, tc := range []struct {
		name string
		got  *metav1.Condition
		want metav1.Time
	}{
		{"no condition yet", nil, now},
		{"same status keeps the time", &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Other", LastTransitionTime: then}, then},
		{"changed status takes now", &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, LastTransitionTime: then}, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := c
			want.LastTransitionTime = tc.want
			if diff := cmp.Diff(want, WithTransitionTime(c, tc.got, now)); diff != "" {
				t.Errorf("WithTransitionTime (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStripNode(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{
			Images:   []corev1.ContainerImage{{Names: []string{"busybox"}}},
			Capacity: corev1.ResourceList{"example.com/gopher": {}},
		},
	}
	out, err := StripNode(node)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{"example.com/gopher": {}}},
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("StripNode (-want +got):\n%s", diff)
	}
	if out, err := StripNode("not a node"); err != nil || out != "not a node" {
		t.Errorf("StripNode of another kind = %v, %v; want it unchanged", out, err)
	}
	if AgentLeaseName("n1") != "kubedevice-agent-n1" {
		t.Errorf("AgentLeaseName(n1) = %q", AgentLeaseName("n1"))
	}
}
