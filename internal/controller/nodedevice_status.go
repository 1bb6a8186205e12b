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
