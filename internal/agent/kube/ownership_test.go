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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kubedevice/kubedevice/internal/contract"
)

func TestAdoptedManagedFields(t *testing.T) {
	entry := func(manager, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "kubedevice.io/v1alpha1",
			FieldsType: "FieldsV1", Subresource: subresource, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	agentSpec := entry(contract.AgentFieldOwner, "", `{"f:spec":{"f:nodeName":{}}}`)
	agentStatus := entry(contract.AgentFieldOwner, "status", `{"f:status":{"f:summary":{}}}`)
	controller := entry(contract.ControllerFieldOwner, "status", `{"f:status":{"f:conditions":{}}}`)

	// Nothing to adopt: written by this agent only, or no entry of the resource to fold into.
	for _, managed := range [][]metav1.ManagedFieldsEntry{{agentSpec, controller}, {agentStatus, controller}, nil} {
		got, adopted, err := adoptedManagedFields(managed)
		if err != nil || adopted || len(got) != len(managed) {
			t.Errorf("adoptedManagedFields(%d entries) = %d entries, %v, %v; want them unchanged", len(managed), len(got), adopted, err)
		}
	}

	got, adopted, err := adoptedManagedFields([]metav1.ManagedFieldsEntry{controller, agentStatus, agentSpec})
	if err != nil || !adopted {
		t.Fatalf("adopted = %v, err = %v", adopted, err)
	}
	if len(got) != 2 || got[0].Manager != contract.ControllerFieldOwner || got[0].Subresource != "status" ||
		got[1].Manager != contract.AgentFieldOwner || got[1].Subresource != "" {
		t.Fatalf("entries after adoption: %+v", got)
	}
	var fields fieldpath.Set
	if err := fields.FromJSON(fieldsReader(got[1].FieldsV1)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []fieldpath.Path{
		fieldpath.MakePathOrDie("spec", "nodeName"),
		fieldpath.MakePathOrDie("status", "summary"),
	} {
		if !fields.Has(p) {
			t.Errorf("the agent's entry of the resource lacks %s: %s", p, got[1].FieldsV1.GetRawBytes())
		}
	}
	if string(controller.FieldsV1.GetRawBytes()) != string(got[0].FieldsV1.GetRawBytes()) {
		t.Errorf("the controller's entry changed: %s", got[0].FieldsV1.GetRawBytes())
	}

	bad := entry(contract.AgentFieldOwner, "status", `not json`)
	if _, _, err := adoptedManagedFields([]metav1.ManagedFieldsEntry{agentSpec, bad}); err == nil {
		t.Error("undecodable managed fields adopted without an error")
	}
}
