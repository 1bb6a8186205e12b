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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// agentReadyCondition returns the AgentReady condition nd should carry for its agent's state: True
// with AgentLeaseValid while the Lease is valid, False with AgentLeaseExpired or AgentLeaseMissing
// otherwise. The transition time is kept while the status does not change.
func agentReadyCondition(nd *kdv1alpha1.NodeDevice, agent agentState, now metav1.Time) metav1.Condition {
	status := metav1.ConditionFalse
	if agent.ready {
		status = metav1.ConditionTrue
	}
	c := metav1.Condition{
		Type:               kdv1alpha1.NodeDeviceAgentReady,
		Status:             status,
		Reason:             agent.reason,
		Message:            agent.message,
		ObservedGeneration: nd.Generation,
	}
	return contract.WithTransitionTime(c, meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady), now)
}

// agentLost reports whether the condition change from got to want is the agent going away (or
// being found away): the moment to warn once.
func agentLost(got *metav1.Condition, want metav1.Condition) bool {
	return want.Status == metav1.ConditionFalse && (got == nil || got.Status != metav1.ConditionFalse)
}
