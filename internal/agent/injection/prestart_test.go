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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

func TestEndedContainer(t *testing.T) {
	terminated := func(id string, code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: id, ExitCode: code}}
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	status := func(name string, state, last corev1.ContainerState, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: state, LastTerminationState: last, RestartCount: restarts}
	}
	for _, tc := range []struct {
		name      string
		policy    corev1.RestartPolicy
		container string
		// init are the pod's init container statuses, app its app container's (named app).
		init, app []corev1.ContainerStatus
		// appPolicy is the app container's own restart policy.
		appPolicy *corev1.ContainerRestartPolicy
		want      string
	}{{
		name: "no status yet", policy: corev1.RestartPolicyAlways, container: "app",
	}, {
		name: "running", policy: corev1.RestartPolicyAlways, container: "app",
		app: []corev1.ContainerStatus{status("app", running, terminated("containerd://c0", 1), 1)},
	}, {
		name: "ended, restartPolicy Always", policy: corev1.RestartPolicyAlways, container: "app",
		app:  []corev1.ContainerStatus{status("app", terminated("containerd://c1", 0), corev1.ContainerState{}, 0)},
		want: "c1",
	}, {
		name: "waiting in back-off after it ended", policy: corev1.RestartPolicyAlways, container: "app",
		app:  []corev1.ContainerStatus{status("app", waiting, terminated("containerd://c2", 137), 2)},
		want: "c2",
	}, {
		name: "waiting for its first start", policy: corev1.RestartPolicyAlways, container: "app",
		app: []corev1.ContainerStatus{status("app", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}, corev1.ContainerState{}, 0)},
	}, {
		name: "succeeded, restartPolicy OnFailure", policy: corev1.RestartPolicyOnFailure, container: "app",
		app: []corev1.ContainerStatus{status("app", terminated("containerd://c1", 0), corev1.ContainerState{}, 0)},
	}, {
		name: "failed, restartPolicy OnFailure", policy: corev1.RestartPolicyOnFailure, container: "app",
		app:  []corev1.ContainerStatus{status("app", terminated("containerd://c1", 2), corev1.ContainerState{}, 0)},
		want: "c1",
	}, {
		name: "failed, restartPolicy Never", policy: corev1.RestartPolicyNever, container: "app",
		app: []corev1.ContainerStatus{status("app", terminated("containerd://c1", 2), corev1.ContainerState{}, 0)},
	}, {
		name: "failed, the container's own restartPolicy Always overrides the pod's Never", policy: corev1.RestartPolicyNever, container: "app",
		appPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		app:       []corev1.ContainerStatus{status("app", terminated("containerd://c1", 0), corev1.ContainerState{}, 0)},
		want:      "c1",
	}, {
		name: "no container ID: its name and restart count", policy: corev1.RestartPolicyAlways, container: "app",
		app:  []corev1.ContainerStatus{status("app", terminated("", 1), corev1.ContainerState{}, 3)},
		want: "app/3",
	}, {
		name: "an init container that failed, restartPolicy OnFailure", policy: corev1.RestartPolicyOnFailure, container: "init",
		init: []corev1.ContainerStatus{status("init", waiting, terminated("containerd://i1", 1), 1)},
		want: "i1",
	}, {
		name: "an init container that succeeded", policy: corev1.RestartPolicyAlways, container: "init",
		init: []corev1.ContainerStatus{status("init", terminated("containerd://i1", 0), corev1.ContainerState{}, 0)},
	}, {
		name: "an init container that failed, restartPolicy Never", policy: corev1.RestartPolicyNever, container: "init",
		init: []corev1.ContainerStatus{status("init", terminated("containerd://i1", 1), corev1.ContainerState{}, 0)},
	}, {
		name: "a sidecar that exited, restartPolicy Never", policy: corev1.RestartPolicyNever, container: "sidecar",
		init: []corev1.ContainerStatus{status("sidecar", terminated("containerd://s1", 0), corev1.ContainerState{}, 0)},
		want: "s1",
	}, {
		name: "the app container's status does not count for an init container of the same name", policy: corev1.RestartPolicyAlways, container: "init",
		app: []corev1.ContainerStatus{status("init", terminated("containerd://x", 1), corev1.ContainerState{}, 0)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testutil.MakePod("p", "ns").Obj()
			pod.Spec.RestartPolicy = tc.policy
			pod.Spec.Containers[0].RestartPolicy = tc.appPolicy
			pod.Spec.InitContainers = []corev1.Container{
				{Name: "init"},
				{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			}
			pod.Status.InitContainerStatuses = tc.init
			pod.Status.ContainerStatuses = tc.app
			if got := endedContainer(pod, kube.ContainerNamed(pod, tc.container)); got != tc.want {
				t.Errorf("endedContainer(%s): got %q, want %q", tc.container, got, tc.want)
			}
		})
	}
}

func TestContainerStatusesChanged(t *testing.T) {
	base := testutil.MakePod("p", "ns").Obj()
	base.Status.Phase = corev1.PodRunning
	base.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"a condition", func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}} }, false},
		{"readiness of a container", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Ready = true }, false},
		{"a container ended", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
		}, true},
		{"a restart", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 }, true},
		{"an init container status", func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init"}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := base.DeepCopy()
			tc.change(updated)
			if got := containerStatusesChanged(event.UpdateEvent{ObjectOld: base, ObjectNew: updated}); got != tc.want {
				t.Errorf("got %t, want %t", got, tc.want)
			}
		})
	}
}
