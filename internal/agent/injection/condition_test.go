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

package injection

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
)

func TestRuntimeInjectionCondition(t *testing.T) {
	status := func(s nri.State) nri.Status {
		return nri.Status{State: s, SocketPath: "/var/run/nri/nri.sock", Plugin: "10-kubedevice"}
	}
	for _, tc := range []struct {
		state      nri.State
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{nri.StateConnected, metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected},
		{nri.StateSocketMissing, metav1.ConditionFalse, kdv1alpha1.ReasonNRISocketMissing},
		{nri.StateDisconnected, metav1.ConditionFalse, kdv1alpha1.ReasonNRIDisconnected},
		{nri.StateDisabled, metav1.ConditionFalse, kdv1alpha1.ReasonInjectionDisabled},
	} {
		c, known := runtimeInjectionCondition(status(tc.state))
		if !known || c.Type != kdv1alpha1.NodeDeviceRuntimeInjectionReady || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message == "" {
			t.Errorf("%s: got %+v (known %v), want %s/%s with a message", tc.state, c, known, tc.wantStatus, tc.wantReason)
		}
	}
	if _, known := runtimeInjectionCondition(status(nri.StateUnknown)); known {
		t.Error("the unknown state gives a condition")
	}
}
