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

package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

func TestAgentReadyCondition(t *testing.T) {
	earlier := metav1.NewTime(testNow.Add(-time.Hour))
	now := metav1.NewTime(testNow)
	valid := agentState{ready: true, reason: kdv1alpha1.ReasonAgentLeaseValid, message: "valid"}
	expired := agentState{reason: kdv1alpha1.ReasonAgentLeaseExpired, message: "expired"}
	withCondition := func(status metav1.ConditionStatus) *kdv1alpha1.NodeDevice {
		o := nd("a", gopher, 4, false)
		o.Generation = 3
		o.Status.Conditions = []metav1.Condition{
			{Type: kdv1alpha1.NodeDeviceRegistered, Status: metav1.ConditionTrue, LastTransitionTime: earlier},
			{Type: kdv1alpha1.NodeDeviceAgentReady, Status: status, LastTransitionTime: earlier},
		}
		return &o
	}
	fresh := nd("a", gopher, 4, false)
	fresh.Generation = 1
	cases := map[string]struct {
		nd    *kdv1alpha1.NodeDevice
		agent agentState
		want  metav1.Condition
	}{
		"first condition, agent ready": {
			nd: &fresh, agent: valid,
			want: metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionTrue,
				Reason: kdv1alpha1.ReasonAgentLeaseValid, Message: "valid", ObservedGeneration: 1, LastTransitionTime: now},
		},
		"still ready: the transition time stays": {
			nd: withCondition(metav1.ConditionTrue), agent: valid,
			want: metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionTrue,
				Reason: kdv1alpha1.ReasonAgentLeaseValid, Message: "valid", ObservedGeneration: 3, LastTransitionTime: earlier},
		},
		"agent lost: transition now": {
			nd: withCondition(metav1.ConditionTrue), agent: expired,
			want: metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionFalse,
				Reason: kdv1alpha1.ReasonAgentLeaseExpired, Message: "expired", ObservedGeneration: 3, LastTransitionTime: now},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, agentReadyCondition(tc.nd, tc.agent, now)); diff != "" {
				t.Errorf("agentReadyCondition (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConditionChangedAndAgentLost(t *testing.T) {
	ready := metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonAgentLeaseValid}
	lost := metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionFalse, Reason: kdv1alpha1.ReasonAgentLeaseExpired}
	readyLater := ready
	readyLater.LastTransitionTime = metav1.NewTime(testNow)
	cases := map[string]struct {
		got, want       *metav1.Condition
		changed, warned bool
	}{
		"absent to ready":              {got: nil, want: &ready, changed: true},
		"absent to lost":               {got: nil, want: &lost, changed: true, warned: true},
		"ready to lost":                {got: &ready, want: &lost, changed: true, warned: true},
		"lost to ready":                {got: &lost, want: &ready, changed: true},
		"only the transition time":     {got: &ready, want: &readyLater},
		"still lost":                   {got: &lost, want: &lost},
		"absent to absent":             {},
		"present to absent is changed": {got: &ready, changed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := conditionChanged(tc.got, tc.want); got != tc.changed {
				t.Errorf("conditionChanged = %v, want %v", got, tc.changed)
			}
			if tc.want != nil {
				if got := agentLost(tc.got, *tc.want); got != tc.warned {
					t.Errorf("agentLost = %v, want %v", got, tc.warned)
				}
			}
		})
	}
}

func TestAwaitsAgentStatus(t *testing.T) {
	valid := metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionTrue}
	expired := metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionFalse}
	created := &kdv1alpha1.NodeDevice{}
	written := &kdv1alpha1.NodeDevice{Status: kdv1alpha1.NodeDeviceStatus{Path: kdv1alpha1.DevicePathNodeCapacity}}
	if !awaitsAgentStatus(created, nil, valid) {
		t.Error("True is written before the agent's first status write, which carries it")
	}
	if awaitsAgentStatus(created, nil, expired) {
		t.Error("False waits for the agent's status")
	}
	if awaitsAgentStatus(written, nil, valid) {
		t.Error("a status written without AgentReady (an earlier agent) does not get it")
	}
	if awaitsAgentStatus(created, &expired, valid) {
		t.Error("an existing condition is not corrected")
	}
}
