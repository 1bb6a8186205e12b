//go:build e2enode

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

package e2enode

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// kubectl runs bin/k8s/kubectl against the e2e cluster and returns its standard output.
func kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectlPath, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", kubectlCacheDir}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// newNamespace creates a namespace for one spec and deletes it, with its pods, when the spec ends.
func newNamespace(ctx context.Context) string {
	ns, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-node-"},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) {
		pods, err := clientset.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			deletePod(ctx, ns.Name, p.Name)
		}
		Expect(clientset.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})).To(Succeed())
	}, NodeTimeout(2*time.Minute))
	return ns.Name
}

// podBuilder makes test pods: MakePod("p", ns).Command(...).Annotate(k, v).Obj().
type podBuilder struct{ pod *corev1.Pod }

// MakePod is a pod of one busybox container from the e2e image, never pulled.
func MakePod(name, namespace string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "3600"},
			}},
		},
	}}
}

func (b *podBuilder) Command(cmd ...string) *podBuilder {
	b.pod.Spec.Containers[0].Command = cmd
	return b
}

func (b *podBuilder) Annotate(key, value string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[key] = value
	return b
}

// OnNode pins the pod to the node named name (its kubernetes.io/hostname label).
func (b *podBuilder) OnNode(name string) *podBuilder {
	b.pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: name}
	return b
}

func (b *podBuilder) HostNetwork() *podBuilder {
	b.pod.Spec.HostNetwork = true
	return b
}

// HostPathFile mounts a file of the node into the container, read-only.
func (b *podBuilder) HostPathFile(volume, hostPath, mountPath string) *podBuilder {
	b.pod.Spec.Volumes = append(b.pod.Spec.Volumes, corev1.Volume{
		Name: volume,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: hostPath, Type: ptr.To(corev1.HostPathFile),
		}},
	})
	c := &b.pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: mountPath, ReadOnly: true})
	return b
}

// Limits asks for quantity of resource (an extended resource: the request is the limit).
func (b *podBuilder) Limits(name string, quantity int64) *podBuilder {
	c := &b.pod.Spec.Containers[0]
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	c.Resources.Limits[corev1.ResourceName(name)] = *resource.NewQuantity(quantity, resource.DecimalSI)
	return b
}

// InitContainer adds an init container, from the same image, that runs the command and asks for
// quantity of the resource res (none when 0).
func (b *podBuilder) InitContainer(name, res string, quantity int64, cmd ...string) *podBuilder {
	c := corev1.Container{Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Command: cmd}
	if quantity > 0 {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(quantity, resource.DecimalSI)}
	}
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, c)
	return b
}

func (b *podBuilder) RestartNever() *podBuilder {
	b.pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return b
}

func (b *podBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

func createPod(ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	created, err := clientset.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return created
}

func getPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// waitForPhase waits for the pod to reach the phase and returns it.
func waitForPhase(ctx context.Context, namespace, name string, phase corev1.PodPhase) *corev1.Pod {
	var pod *corev1.Pod
	Eventually(ctx, func(g Gomega) {
		var err error
		pod, err = getPod(ctx, namespace, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pod.Status.Phase).To(Equal(phase), "pod %s/%s: %s", namespace, name, describeStatus(pod))
	}).Should(Succeed())
	return pod
}

// deletePod deletes the pod and waits until the kubelet has confirmed its termination.
func deletePod(ctx context.Context, namespace, name string) {
	err := clientset.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred())
	Eventually(ctx, func() bool {
		_, err := getPod(ctx, namespace, name)
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "pod %s/%s was not removed", namespace, name)
}

// describeStatus is a one-line summary of a pod's containers, for failure messages.
func describeStatus(pod *corev1.Pod) string {
	var parts []string
	for _, s := range pod.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting %s: %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
		case s.State.Running != nil:
			parts = append(parts, s.Name+" running")
		case s.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s terminated %s (%d)", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode))
		}
	}
	phase := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		phase += fmt.Sprintf(" (%s: %s)", pod.Status.Reason, pod.Status.Message)
	}
	return fmt.Sprintf("phase %s, %s", phase, strings.Join(parts, "; "))
}

// running: the pod's phase is Running and all its containers run.
func running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}

// podTimes are the moments the suite saw a pod bound to the node and running.
type podTimes struct {
	bound, running time.Time
	pod            *corev1.Pod
}

// watchUntilRunning watches the pod until all its containers run and returns when it first saw
// it bound and running (watch events, not polls: the moments are those of the API server's
// notifications). A pod that is already bound when the watch starts is seen bound then.
func watchUntilRunning(ctx context.Context, namespace, name string, timeout time.Duration) podTimes {
	return startWatchingPod(ctx, namespace, name, timeout)()
}

// startWatchingPod starts watching the pod, returns once the watch has seen the pod's current
// state (or its absence), and returns the function that waits until the pod runs, as
// watchUntilRunning does. Start it before what should make the pod run, to see every change.
func startWatchingPod(ctx context.Context, namespace, name string, timeout time.Duration) func() podTimes {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	var (
		t      podTimes
		err    error
		synced = make(chan struct{})
		done   = make(chan struct{})
	)
	lw := cache.NewListWatchFromClient(clientset.CoreV1().RESTClient(), "pods", namespace, fields.OneTermEqualSelector("metadata.name", name))
	go func() {
		defer GinkgoRecover()
		defer close(done)
		_, err = watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, func(cache.Store) (bool, error) {
			close(synced)
			return false, nil
		}, func(ev watch.Event) (bool, error) {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return false, nil
			}
			now := time.Now()
			t.pod = pod
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("pod %s/%s was deleted", namespace, name)
			}
			if t.bound.IsZero() && pod.Spec.NodeName != "" {
				t.bound = now
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				return false, fmt.Errorf("pod %s/%s ended: %s", namespace, name, describeStatus(pod))
			}
			if running(pod) {
				t.running = now
				return true, nil
			}
			return false, nil
		})
	}()
	select {
	case <-synced:
	case <-done:
		cancel()
		Expect(err).NotTo(HaveOccurred(), "watching pod %s/%s", namespace, name)
	}
	return func() podTimes {
		defer cancel()
		<-done
		status := "never seen"
		if t.pod != nil {
			status = describeStatus(t.pod)
		}
		Expect(err).NotTo(HaveOccurred(), "waiting for pod %s/%s to run: %s", namespace, name, status)
		return t
	}
}

// execIn runs a command in the pod's first container with kubectl exec and returns its output.
func execIn(ctx context.Context, namespace, pod string, command ...string) (string, error) {
	return kubectl(ctx, append([]string{"exec", "-n", namespace, pod, "--"}, command...)...)
}

// timingPrefix marks the report entries that are the scenario's timings; the suite's report ends
// with a table of them.
const timingPrefix = "timing: "

// recordTiming reports how long something took: in the spec's report and in the suite's closing
// table.
func recordTiming(what string, d time.Duration) {
	d = d.Round(time.Millisecond)
	GinkgoWriter.Printf("%s%s: %s\n", timingPrefix, what, d)
	AddReportEntry(timingPrefix+what, d)
}
