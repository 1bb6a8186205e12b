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

package devenv

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestEmbeddedManifests(t *testing.T) {
	crds, err := embeddedCRDs()
	if err != nil {
		t.Fatalf("embeddedCRDs: %v", err)
	}
	var names []string
	for _, crd := range crds {
		names = append(names, crd.Name)
	}
	if diff := cmp.Diff([]string{"deviceallocations.kubedevice.io", "nodedevices.kubedevice.io"}, names); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}

	objs, err := embeddedAdmissionPolicies()
	if err != nil {
		t.Fatalf("embeddedAdmissionPolicies: %v", err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	want := []string{
		"ValidatingAdmissionPolicy/kubedevice-agent-node-restriction",
		"ValidatingAdmissionPolicyBinding/kubedevice-agent-node-restriction",
		"ValidatingAdmissionPolicy/kubedevice-agent-lease",
		"ValidatingAdmissionPolicyBinding/kubedevice-agent-lease",
		"ValidatingAdmissionPolicy/kubedevice-agent-resourceslices",
		"ValidatingAdmissionPolicyBinding/kubedevice-agent-resourceslices",
		"ValidatingAdmissionPolicy/kubedevice-controller-node-status",
		"ValidatingAdmissionPolicyBinding/kubedevice-controller-node-status",
		"MutatingAdmissionPolicy/kubedevice-injection-gate",
		"MutatingAdmissionPolicyBinding/kubedevice-injection-gate",
		"ConfigMap/kubedevice-admission",
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("admission objects (-want +got):\n%s", diff)
	}
}

func TestGopherPodAsksForOneGopher(t *testing.T) {
	pod := gopherPod("p")
	one := resource.MustParse("1")
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	res := pod.Spec.Containers[0].Resources
	for what, list := range map[string]corev1.ResourceList{"requests": res.Requests, "limits": res.Limits} {
		if q, ok := list[ResourceName]; !ok || q.Cmp(one) != 0 {
			t.Errorf("%s[%s] = %v, want 1", what, ResourceName, list[ResourceName])
		}
	}
	if pod.Namespace != PodNamespace || pod.Spec.NodeName != "" {
		t.Errorf("pod in namespace %q on node %q, want it in %q and unbound", pod.Namespace, pod.Spec.NodeName, PodNamespace)
	}
}
