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

package admission

import (
	"github.com/containerd/nri/pkg/api"
	validator "github.com/containerd/nri/plugins/default-validator"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	gopher corev1.ResourceName = "example.com/gopher"
	// gpu is another device manager's resource, not listed in the policy's parameters.
	gpu corev1.ResourceName = "vendor.com/gpu"

	podKey       = nri.RequiredPluginsAnnotation
	namelessKey  = "required-plugins.noderesource.dev"
	containerKey = "required-plugins.noderesource.dev/container."
)

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "adm-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed()) })
	return ns.Name
}

// create creates the pod and returns it as the API server stored it.
func create(w *testutil.PodWrapper) *corev1.Pod {
	GinkgoHelper()
	pod := w.Obj()
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// withAnnotations sets annotations on the pod.
func withAnnotations(w *testutil.PodWrapper, kv ...string) *testutil.PodWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		w.Annotations[kv[i]] = kv[i+1]
	}
	return w
}

// validate runs containerd's default NRI validator on the creation of the pod's container with
// the given plugins connected, as containerd does with default_validator.enable = true.
func validate(pod *corev1.Pod, container string, connected ...string) error {
	req := &api.ValidateContainerAdjustmentRequest{
		Pod:       &api.PodSandbox{Uid: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Annotations: pod.Annotations},
		Container: &api.Container{Name: container},
	}
	for _, p := range connected {
		req.AddPlugin(p, "10")
	}
	return validator.NewDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}).ValidateContainerAdjustment(ctx, req)
}

// expectGated asserts that containerd refuses the pod's container while the kubedevice plugin is
// not connected, and creates it once the plugin and the others connect.
func expectGated(pod *corev1.Pod, container string, others ...string) {
	GinkgoHelper()
	Expect(validate(pod, container, others...)).To(MatchError(ContainSubstring(`required plugin "kubedevice" not present`)),
		"annotations %v", pod.Annotations)
	Expect(validate(pod, container, append(others, nri.PluginName)...)).To(Succeed(), "annotations %v", pod.Annotations)
}

// setResources writes the policy's parameters: the resources it gates.
func setResources(entries string) {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "kubedevice-admission"}, cm)).To(Succeed())
	cm.Data = map[string]string{"resources": entries}
	Expect(k8sClient.Update(ctx, cm)).To(Succeed())
}

// gopherOnDryRun returns the annotations a pod asking for a gopher would be created with now.
func gopherOnDryRun(ns string) func() (map[string]string, error) {
	return func() (map[string]string, error) {
		pod := testutil.MakePod("probe", ns).Request(gopher, 1).Obj()
		err := k8sClient.Create(ctx, pod, client.DryRunAll)
		return pod.Annotations, err
	}
}

var _ = Describe("Injection gate admission policy", Ordered, func() {
	var ns string

	BeforeAll(func() {
		By("installing the policy, its binding and its parameters from config/admission")
		for _, obj := range loadManifests("config/admission/pod_injection_gate.yaml", "config/admission/pod_injection_gate_params.yaml") {
			Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed()) })
		}
		By("waiting for the policy to be in force")
		Eventually(gopherOnDryRun(newNamespace())).Should(HaveKeyWithValue(podKey, `["kubedevice"]`))
	})
	BeforeEach(func() { ns = newNamespace() })

	It("annotates a pod that requests a listed resource, so containerd holds it until the plugin connects", func() {
		pod := create(testutil.MakePod("trainer", ns).Request(gopher, 1))
		Expect(pod.Annotations).To(Equal(map[string]string{podKey: `["kubedevice"]`}))
		expectGated(pod, "app")
	})

	It("annotates a pod whose init or sidecar container alone requests one, or that only limits it", func() {
		for _, w := range []*testutil.PodWrapper{
			testutil.MakePod("init", ns).InitContainer("setup", gopher, 1),
			testutil.MakePod("sidecar", ns).SidecarContainer("agent", gopher, 1),
		} {
			pod := create(w)
			Expect(pod.Annotations).To(HaveKeyWithValue(podKey, `["kubedevice"]`), pod.Name)
		}
		limitsOnly := testutil.MakePod("limits", ns)
		limitsOnly.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gopher: resource.MustParse("1")}
		Expect(create(limitsOnly).Annotations).To(HaveKeyWithValue(podKey, `["kubedevice"]`))
	})

	It("extends the lists already on the pod rather than replacing them", func() {
		for _, tc := range []struct {
			value, want string
			// others are the plugins the list names besides kubedevice.
			others []string
		}{
			{`["other"]`, `["other", "kubedevice"]`, []string{"other"}},
			{`[ "other" , "more" ]  `, `[ "other" , "more" , "kubedevice"]`, []string{"other", "more"}},
			{`[]`, `["kubedevice"]`, nil},
			{"- other\n- more\n", "- other\n- more\n- kubedevice", []string{"other", "more"}},
			{`["kubedevice", "other"]`, `["kubedevice", "other"]`, []string{"other"}},
			{`[other, kubedevice]`, `[other, kubedevice]`, []string{"other"}},
			{`["my-kubedevice"]`, `["my-kubedevice", "kubedevice"]`, []string{"my-kubedevice"}},
		} {
			pod := create(withAnnotations(testutil.MakePod("listed", ns).Request(gopher, 1), podKey, tc.value))
			Expect(pod.Annotations).To(HaveKeyWithValue(podKey, tc.want), "from %q", tc.value)
			expectGated(pod, "app", tc.others...)
			Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		}
	})

	It("starts the pod-wide list from the namespace-less annotation, and extends container-scoped ones", func() {
		pod := create(withAnnotations(testutil.MakePod("scoped", ns).Request(gopher, 1).Container("tool"),
			namelessKey, `["other"]`,
			containerKey+"tool", `["tool-plugin"]`,
			containerKey+"app", `["kubedevice"]`))
		Expect(pod.Annotations).To(Equal(map[string]string{
			namelessKey:           `["other"]`,
			podKey:                `["other", "kubedevice"]`,
			containerKey + "tool": `["tool-plugin", "kubedevice"]`,
			containerKey + "app":  `["kubedevice"]`,
		}))
		expectGated(pod, "app")
		expectGated(pod, "tool", "tool-plugin")
	})

	It("leaves alone an annotation that is no list: containerd refuses it anyway", func() {
		pod := create(withAnnotations(testutil.MakePod("broken", ns).Request(gopher, 1), podKey, `other`))
		Expect(pod.Annotations).To(Equal(map[string]string{podKey: `other`}))
		Expect(validate(pod, "app", nri.PluginName, "other")).To(MatchError(ContainSubstring("invalid")))
	})

	It("never touches a plain pod, another device manager's pod, kubedevice's own pods or an opted-out pod", func() {
		plain := create(testutil.MakePod("plain", ns))
		Expect(plain.Annotations).To(BeEmpty())
		Expect(validate(plain, "app")).To(Succeed())

		other := create(testutil.MakePod("gpu", ns).Request(gpu, 1).Request("example.org/gopher", 1))
		Expect(other.Annotations).To(BeEmpty())

		own := create(testutil.MakePod("gopher-plugin", systemNamespace).Request(gopher, 1))
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, own))).To(Succeed()) })
		Expect(own.Annotations).To(BeEmpty())

		optedOut := testutil.MakePod("opted-out", ns).Request(gopher, 1)
		optedOut.Labels = map[string]string{"kubedevice.io/no-injection-gate": "true"}
		Expect(create(optedOut).Annotations).To(BeEmpty())

		otherLabel := testutil.MakePod("other-label", ns).Request(gopher, 1)
		otherLabel.Labels = map[string]string{"kubedevice.io/no-injection-gate": "false"}
		Expect(create(otherLabel).Annotations).To(HaveKeyWithValue(podKey, `["kubedevice"]`))
	})

	It("gates exactly the resources the parameters list", func() {
		DeferCleanup(setResources, "example.com/*\n")
		setResources("# GPUs are served by kubedevice on every GPU node\nvendor.com/gpu, ,\n")
		Eventually(gopherOnDryRun(ns)).Should(BeEmpty())

		pod := create(testutil.MakePod("gpu", ns).Request(gpu, 2))
		Expect(pod.Annotations).To(HaveKeyWithValue(podKey, `["kubedevice"]`))
		Expect(create(testutil.MakePod("gpus", ns).Request("vendor.com/gpu-large", 1)).Annotations).To(BeEmpty(),
			"an exact name is not a prefix")
		Expect(create(testutil.MakePod("sub", ns).Request("sub.vendor.com/gpu", 1)).Annotations).To(BeEmpty())
	})

	It("gates nothing without its parameters", func() {
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "kubedevice-admission"}, cm)).To(Succeed())
		Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		DeferCleanup(func() {
			for _, obj := range loadManifests("config/admission/pod_injection_gate_params.yaml") {
				Expect(k8sClient.Create(ctx, obj)).To(Succeed())
			}
			Eventually(gopherOnDryRun(ns)).Should(HaveKey(podKey))
		})
		Eventually(gopherOnDryRun(ns)).Should(BeEmpty())
		Expect(create(testutil.MakePod("unguarded", ns).Request(gopher, 1)).Annotations).To(BeEmpty())
	})
})
