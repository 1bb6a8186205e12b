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
