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

package install

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

var errNotYet = errors.New("not yet")

// TestRendersAreAcceptedByTheAPIServer applies every install with a server-side dry run and strict
// field validation to a real kube-apiserver that has the kubedevice CRDs installed: config/default,
// the Gopher sample, and the chart with its default values, with each ci/ values file and in
// another namespace. The API server validates everything a real install would meet: unknown or
// misspelt fields, workload specs, RBAC rules and bindings, the admission policies (CEL compiled
// against the types), the CRDs themselves. The chart's hooks are applied too.
func TestRendersAreAcceptedByTheAPIServer(t *testing.T) {
	startAPIServer(t)
	cases := map[string]func(t *testing.T) []*unstructured.Unstructured{
		"kustomize config/default": func(t *testing.T) []*unstructured.Unstructured {
			return kustomizeBuild(t, filepath.Join(configDir, "default"))
		},
		"kustomize config/samples/gopher": func(t *testing.T) []*unstructured.Unstructured {
			return kustomizeBuild(t, filepath.Join(configDir, "samples", "gopher"))
		},
		"helm default values": func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, namespace)
		},
		"helm in another namespace": func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, otherNamespace)
		},
	}
	for _, f := range ciValuesFiles(t) {
		cases["helm "+filepath.Base(f)] = func(t *testing.T) []*unstructured.Unstructured {
			return helmTemplate(t, namespace, "--values", f)
		}
	}
	for name, render := range cases {
		t.Run(name, func(t *testing.T) {
			objs := render(t)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			// The chart's hooks (the uninstall cleanup Job and its RBAC) are applied with the rest.
			if name == "helm default values" && !slices.ContainsFunc(objs, isHelmHook) {
				t.Error("the chart renders no hook with its default values: the cleanup hook is missing")
			}
			applyRender(t.Context(), t, objs, true)
		})
	}
}

// TestDryRunRejectsBadObjects shows that the dry run above can fail: the same objects with one
// mistake each are refused by the API server.
func TestDryRunRejectsBadObjects(t *testing.T) {
	startAPIServer(t)
	objs := kustomizeBuild(t, filepath.Join(configDir, "default"))
	ensureNamespace(t.Context(), t, namespace)
	cases := map[string]struct {
		kind, name string
		mutate     func(u *unstructured.Unstructured)
		want       string
	}{
		"misspelt container field": {
			kind: "DaemonSet", name: "kubedevice-agent",
			mutate: func(u *unstructured.Unstructured) {
				cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				cs[0].(map[string]any)["imagePullPolcy"] = "Never"
				_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
			},
			want: "imagePullPolcy",
		},
		"invalid hostPath type": {
			kind: "DaemonSet", name: "kubedevice-agent",
			mutate: func(u *unstructured.Unstructured) {
				vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
				vs[0].(map[string]any)["hostPath"].(map[string]any)["type"] = "Dir"
				_ = unstructured.SetNestedSlice(u.Object, vs, "spec", "template", "spec", "volumes")
			},
			want: "hostPath.type",
		},
		"CEL that does not compile": {
			kind: "ValidatingAdmissionPolicy", name: "kubedevice-agent-node-restriction",
			mutate: func(u *unstructured.Unstructured) {
				vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "validations")
				vs[0].(map[string]any)["expression"] = "variables.userNodeName =="
				_ = unstructured.SetNestedSlice(u.Object, vs, "spec", "validations")
			},
			want: "compilation failed",
		},
		"RBAC rule without verbs": {
			kind: "ClusterRole", name: "kubedevice-agent",
			mutate: func(u *unstructured.Unstructured) {
				rs, _, _ := unstructured.NestedSlice(u.Object, "rules")
				rs[0].(map[string]any)["verbs"] = []any{}
				_ = unstructured.SetNestedSlice(u.Object, rs, "rules")
			},
			want: "verbs",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := find(t, objs, tc.kind, tc.name).DeepCopy()
			if err := apply(t.Context(), u, true); err != nil {
				t.Fatalf("the unchanged object is refused: %v", err)
			}
			tc.mutate(u)
			err := apply(t.Context(), u, true)
			if err == nil {
				t.Fatal("the API server accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused without naming %q: %v", tc.want, err)
			}
		})
	}
}

// TestServiceMonitorsSelectTheMetricsPorts checks what the test API server cannot (it has no
// ServiceMonitor CRD): each ServiceMonitor selects one Service by its labels, scrapes a port that
// Service has, and that Service sends it to the `metrics` container port of the pods it selects.
func TestServiceMonitorsSelectTheMetricsPorts(t *testing.T) {
	objs := helmTemplate(t, namespace, "--values", filepath.Join(chartDir, "ci", "all-non-default-values.yaml"))
	var monitors, services, workloads []*unstructured.Unstructured
	for _, u := range objs {
		switch {
		case isServiceMonitor(u):
			monitors = append(monitors, u)
		case u.GetKind() == "Service":
			services = append(services, u)
		case u.GetKind() == "DaemonSet" || u.GetKind() == "Deployment":
			workloads = append(workloads, u)
		}
	}
	if len(monitors) != 2 {
		t.Fatalf("%d ServiceMonitors with metrics.serviceMonitor.enabled, want 2 (agent, controller)", len(monitors))
	}
	for _, m := range monitors {
		sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
		var matched []*unstructured.Unstructured
		for _, s := range services {
			if labels.SelectorFromSet(sel).Matches(labels.Set(s.GetLabels())) {
				matched = append(matched, s)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s selects %d Services, want 1", key(m), len(matched))
			continue
		}
		svc := matched[0]
		endpoints, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		podSel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		for _, e := range endpoints {
			want := e.(map[string]any)["port"]
			found := false
			for _, p := range ports {
				if p.(map[string]any)["name"] == want && p.(map[string]any)["targetPort"] == "metrics" {
					found = true
				}
			}
			if !found {
				t.Errorf("%s scrapes port %v, which %s does not send to the pods' metrics port", key(m), want, key(svc))
			}
		}
		pods := 0
		for _, w := range workloads {
			podLabels, _, _ := unstructured.NestedStringMap(w.Object, "spec", "template", "metadata", "labels")
			if !labels.SelectorFromSet(podSel).Matches(labels.Set(podLabels)) {
				continue
			}
			pods++
			cs, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
			cps, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "ports")
			named := false
			for _, p := range cps {
				named = named || p.(map[string]any)["name"] == "metrics"
			}
			if !named {
				t.Errorf("%s selects %s, whose container has no port named metrics", key(svc), key(w))
			}
		}
		if pods != 1 {
			t.Errorf("%s selects the pods of %d workloads, want 1", key(svc), pods)
		}
	}
}

var installed struct {
	once sync.Once
	objs []*unstructured.Unstructured
	ok   bool
}

// installForReal applies config/default to the test API server for real, once, and returns it.
func installForReal(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	startAPIServer(t)
	installed.once.Do(func() {
		objs := kustomizeBuild(t, filepath.Join(configDir, "default"))
		applyRender(t.Context(), t, objs, false)
		installed.objs, installed.ok = objs, !t.Failed()
	})
	if !installed.ok {
		t.Fatal("config/default could not be installed")
	}
	return installed.objs
}

// TestAgentTokenNamesItsNode installs config/default for real and runs the agent's pod, as the
// DaemonSet creates it, on a node. The token the kubelet would mount for it (a TokenRequest bound
// to the pod: ServiceAccountTokenPodNodeInfo, GA and locked on since 1.32) authenticates as the
// agent's service account with the node claim authentication.kubernetes.io/node-name, and with
// it the admission policy lets the agent write its own node's NodeDevices and no other's; a token
// that is not bound to a pod on a node writes nothing.
func TestAgentTokenNamesItsNode(t *testing.T) {
	cfg := startAPIServer(t)
	ctx := t.Context()
	objs := installForReal(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	const nodeName = "node-a"
	if _, err := admin.CoreV1().Nodes().Create(ctx, newNode(nodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := toDaemonSet(t, find(t, objs, "DaemonSet", "kubedevice-agent"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kubedevice-agent-test", Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = nodeName
	pod, err = admin.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod as its DaemonSet would: %v", err)
	}

	tokenFor := func(bound *authenticationv1.BoundObjectReference) string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "kubedevice-agent", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: bound},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token: %v", err)
		}
		return tr.Status.Token
	}
	asAgent := func(token string) *rest.Config {
		c := rest.AnonymousClientConfig(cfg)
		c.BearerToken = token
		return c
	}

	podToken := asAgent(tokenFor(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}))
	agentClientset, err := kubernetes.NewForConfig(podToken)
	if err != nil {
		t.Fatal(err)
	}
	review, err := agentClientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking who the agent's token is: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+namespace+":kubedevice-agent"; got != want {
		t.Errorf("the agent authenticates as %q, want %q", got, want)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != nodeName {
		t.Fatalf("the agent's token carries node claim %v, want [%s]", got, nodeName)
	}

	agent, err := client.New(podToken, client.Options{Scheme: testutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	create := func(c client.Client, node string) error {
		nd := testutil.MakeNodeDevice(node + ".example-com-gopher").Node(node).Obj()
		return c.Create(ctx, nd, client.DryRunAll)
	}
	// The policy and the role binding take effect once the API server's informers have them.
	const refusal = "may only write objects of its own node"
	var last error
	if waitFor(30*time.Second, func() error {
		last = create(agent, "node-b")
		if last != nil && strings.Contains(last.Error(), refusal) {
			return nil
		}
		return errNotYet
	}) != nil {
		t.Fatalf("writing node-b's NodeDevice as node-a's agent: %v, want the admission policy's refusal", last)
	}
	if err := waitFor(30*time.Second, func() error { return create(agent, nodeName) }); err != nil {
		t.Errorf("the agent may not write its own node's NodeDevice: %v", err)
	}

	unbound, err := client.New(asAgent(tokenFor(nil)), client.Options{Scheme: testutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := create(unbound, nodeName); err == nil || !strings.Contains(err.Error(), "no node association found") {
		t.Errorf("with a token bound to no pod the agent's write gave %v, want the admission policy's refusal", err)
	}
}

// requiredPluginsAnnotation is containerd's pod annotation naming the NRI plugins that must be
// connected before the pod's containers are created.
const requiredPluginsAnnotation = "required-plugins.noderesource.dev/pod"

// TestInjectionGateIsWired checks the injection gate as config/default installs it: a pod that
// asks for a gopher gets the required-plugins annotation naming kubedevice (so the binding finds
// its ConfigMap in the install's namespace), while the Gopher sample's plugin pod and the agent's
// own pod, which must start without the agent, do not.
func TestInjectionGateIsWired(t *testing.T) {
	cfg := startAPIServer(t)
	ctx := t.Context()
	objs := installForReal(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(ctx, t, "apps")
	gopherPod := func(name string) *corev1.Pod {
		return testutil.MakePod(name, "apps").Request("example.com/gopher", 1).Obj()
	}
	// The policy takes effect once the API server's informers have it and its ConfigMap.
	var gated *corev1.Pod
	if err := waitFor(30*time.Second, func() error {
		gated, err = admin.CoreV1().Pods("apps").Create(ctx, gopherPod("gopher-pod"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !strings.Contains(gated.Annotations[requiredPluginsAnnotation], `"kubedevice"`) {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatalf("a pod asking for example.com/gopher has annotations %v (%v), want %s naming kubedevice", gated.GetAnnotations(), err, requiredPluginsAnnotation)
	}

	sample := kustomizeBuild(t, filepath.Join(configDir, "samples", "gopher"))
	for _, ds := range []struct {
		objs []*unstructured.Unstructured
		name string
	}{{sample, "gopher-device-plugin"}, {objs, "kubedevice-agent"}} {
		d := toDaemonSet(t, find(t, ds.objs, "DaemonSet", ds.name))
		ensureNamespace(ctx, t, d.Namespace)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: ds.name + "-gate-test", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		// Asking for a gopher too, so only the pod's namespace or label keeps the gate away.
		c := &pod.Spec.Containers[0]
		for _, l := range []*corev1.ResourceList{&c.Resources.Requests, &c.Resources.Limits} {
			if *l == nil {
				*l = corev1.ResourceList{}
			}
			(*l)["example.com/gopher"] = resource.MustParse("1")
		}
		got, err := admin.CoreV1().Pods(d.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("creating the pod of %s: %v", ds.name, err)
		}
		if v, ok := got.Annotations[requiredPluginsAnnotation]; ok {
			t.Errorf("the pod of %s is gated (%s=%s): it must start without the agent's NRI plugin", ds.name, requiredPluginsAnnotation, v)
		}
	}
}
