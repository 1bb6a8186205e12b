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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kubedevice/kubedevice/config"
)

// fieldOwner is the field manager of what kubedevice dev applies.
const fieldOwner = "kubedevice-dev"

// readYAMLDocuments splits a multi-document YAML file into its non-empty documents, as JSON.
func readYAMLDocuments(f config.File) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.Data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Name, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("converting %s to JSON: %w", f.Name, err)
		}
		if string(js) == "null" {
			continue
		}
		docs = append(docs, js)
	}
}

// embeddedCRDs decodes the CRDs embedded in the binary.
func embeddedCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := config.CRDs()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		docs, err := readYAMLDocuments(f)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(d, crd); err != nil {
				return nil, fmt.Errorf("decoding a CRD of %s: %w", f.Name, err)
			}
			crds = append(crds, crd)
		}
	}
	if len(crds) == 0 {
		return nil, errors.New("decoding the embedded CRDs: there are none")
	}
	return crds, nil
}

// embeddedAdmissionPolicies decodes the admission policies and bindings embedded in the binary.
func embeddedAdmissionPolicies() ([]*unstructured.Unstructured, error) {
	files, err := config.AdmissionPolicies()
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		docs, err := readYAMLDocuments(f)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(d); err != nil {
				return nil, fmt.Errorf("decoding an object of %s: %w", f.Name, err)
			}
			objs = append(objs, u)
		}
	}
	return objs, nil
}

// installManifests installs the CRDs (waiting until they are served) and applies the admission
// policies. It returns what it installed, for the progress line.
func installManifests(ctx context.Context, cfg *rest.Config, c client.Client, timeout time.Duration) (string, error) {
	crds, err := embeddedCRDs()
	if err != nil {
		return "", err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds, MaxTime: timeout}); err != nil {
		return "", fmt.Errorf("installing the CRDs: %w", err)
	}
	policies, err := embeddedAdmissionPolicies()
	if err != nil {
		return "", err
	}
	for _, u := range policies {
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := c.Apply(reqCtx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
		cancel()
		if err != nil {
			return "", fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return fmt.Sprintf("%d CRDs, %d admission objects", len(crds), len(policies)), nil
}

// createNamespace creates the agent's namespace.
func createNamespace(ctx context.Context, c client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// demoNode is the demo's node as a kubelet would register it: a few CPUs, some memory, room for
// pods, no taints.
func demoNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   NodeName,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: goruntime.GOARCH,
			},
		},
	}
}

// demoNodeStatus is the status a kubelet would report for a Ready node.
func demoNodeStatus(now metav1.Time) corev1.NodeStatus {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources.DeepCopy(),
		Conditions: []corev1.NodeCondition{{
			Type:               corev1.NodeReady,
			Status:             corev1.ConditionTrue,
			Reason:             "KubeletReady",
			Message:            "kubedevice dev: no kubelet runs on this node; it is kept Ready for the scheduler",
			LastHeartbeatTime:  now,
			LastTransitionTime: now,
		}},
		NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: goruntime.GOARCH},
	}
}

// createNode creates the demo node and makes it Ready through the status subresource, as a
// kubelet would. The API server's TaintNodesByCondition admission gives a new node the
// node.kubernetes.io/not-ready taint, which the node lifecycle controller of
// kube-controller-manager removes once the node is Ready; there is none here, so the taint is
// removed too.
func createNode(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	node := demoNode()
	if err := c.Create(ctx, node); err != nil {
		return fmt.Errorf("creating node %s: %w", NodeName, err)
	}
	node.Status = demoNodeStatus(metav1.Now())
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("making node %s Ready: %w", NodeName, err)
	}
	if len(node.Spec.Taints) > 0 {
		node.Spec.Taints = nil
		if err := c.Update(ctx, node); err != nil {
			return fmt.Errorf("removing the taints of node %s: %w", NodeName, err)
		}
	}
	return nil
}

// gopherPod is a pod asking for one gopher. No kubelet runs it; with no grace period a
// `kubectl delete pod` removes it at once, and the agent frees its gopher.
func gopherPod(name string) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: PodNamespace,
			Labels:    map[string]string{"app.kubernetes.io/name": "gopher-demo"},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:    "gopher",
				Image:   "busybox",
				Command: []string{"sh", "-c", "echo GOPHER=$GOPHER; ls -l /gophers; sleep 3600"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{ResourceName: one},
					Limits:   corev1.ResourceList{ResourceName: one},
				},
			}},
		},
	}
}

// createPod creates a gopher pod and returns it.
func createPod(ctx context.Context, c client.Client, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	pod := gopherPod(name)
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s: %w", name, err)
	}
	return pod, nil
}
