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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
