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
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/contract"
)

// The demo's DRA scenario (--dra): the agent is the DRA driver kubedevice.io for the Gopher's
// resource, the plugin serves two gophers, and the scheduler allocates one to a pod with plain
// limits (through the DeviceClass's extendedResourceName) and the other to a ResourceClaim.
const (
	// DRAGopherID2 is the DRA demo's second gopher, the one ClaimName selects.
	DRAGopherID2 = "gopher-1"
	// DeviceClassName is the DeviceClass the controller keeps for ResourceName.
	DeviceClassName = "gopher.example.com"
	// ClaimName is the ResourceClaim selecting DRAGopherID2 by its plugin ID.
	ClaimName = "gopher-claim"
	// ClaimPodName is the pod using ClaimName.
	ClaimPodName = "gopher-claim-pod"
	// claimRequest is the claim's request and the pod's claim name.
	claimRequest = "gopher"
)

// draGophers are the gophers the plugin serves in the DRA demo.
var draGophers = []string{GopherID, DRAGopherID2}

// draAgentArgs are the agent's DRA flags: every directory the dev cluster's own. No kubelet
// watches the registry directory, so the driver's registration is never taken up; the
// ResourceSlices go straight to the API server.
func (d *dev) draAgentArgs() []string {
	return []string{
		"--dra-resources=" + ResourceName,
		"--kubelet-plugins-dir=" + d.l.kubeletPluginsDir(),
		"--kubelet-registry-dir=" + d.l.draRegistryDir(),
		"--cdi-dir=" + d.l.cdiDir(),
	}
}

// runDRA publishes the gophers as ResourceSlices and has the scheduler allocate one to a claim's
// pod and one to a pod with plain limits.
func (d *dev) runDRA(ctx context.Context) error {
	p := d.p
	if err := p.run("Publishing "+ResourceName+" through DRA", d.waitSlices(ctx)); err != nil {
		return err
	}
	if err := p.run("Creating "+ClaimName+" and "+ClaimPodName, d.runClaimPod(ctx)); err != nil {
		return err
	}
	return p.run("Creating "+PodName+" (plain limits)", d.runDRALimitsPod(ctx))
}

// sliceDevices returns the devices of the driver's ResourceSlices on the demo node.
func sliceDevices(ctx context.Context, c client.Client) ([]string, error) {
	var slices resourcev1.ResourceSliceList
	if err := c.List(ctx, &slices); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	var devices []string
	for _, s := range slices.Items {
		if s.Spec.Driver == contract.DRADriverName && ptr.Deref(s.Spec.NodeName, "") == NodeName {
			for _, dev := range s.Spec.Devices {
				devices = append(devices, dev.Name)
			}
		}
	}
	return devices, nil
}

func (d *dev) waitSlices(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		what := fmt.Sprintf("the ResourceSlices of %s on %s to list %s", contract.DRADriverName, NodeName, strings.Join(draGophers, ", "))
		if err := d.waitFor(ctx, what, []string{agentName}, func(ctx context.Context) (bool, string, error) {
			devices, err := sliceDevices(ctx, d.c)
			if err != nil {
				return false, "", err
			}
			return strings.Join(devices, ",") == strings.Join(draGophers, ","), fmt.Sprintf("devices %v", devices), nil
		}); err != nil {
			return "", err
		}
		what = fmt.Sprintf("kubedevice-controller to create DeviceClass %s with extendedResourceName %s", DeviceClassName, ResourceName)
		if err := d.waitFor(ctx, what, []string{controllerName}, func(ctx context.Context) (bool, string, error) {
			var dc resourcev1.DeviceClass
			if err := d.c.Get(ctx, client.ObjectKey{Name: DeviceClassName}, &dc); err != nil {
				return false, "", fmt.Errorf("getting DeviceClass %s: %w", DeviceClassName, err)
			}
			got := ptr.Deref(dc.Spec.ExtendedResourceName, "")
			return got == ResourceName, fmt.Sprintf("extendedResourceName %q", got), nil
		}); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d devices in ResourceSlices, DeviceClass %s", len(draGophers), DeviceClassName), nil
	}
}

// gopherClaim selects DRAGopherID2 by the plugin's device ID.
func gopherClaim() *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimName, Namespace: PodNamespace},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: claimRequest,
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: DeviceClassName,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes[%q].deviceID == %q`, contract.DRADriverName, DRAGopherID2),
				}}},
			},
		}}}},
	}
}

// claimPod uses ClaimName, and asks for no extended resource.
func claimPod() *corev1.Pod {
	pod := gopherPod(ClaimPodName)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimRequest, ResourceClaimName: ptr.To(ClaimName)}}
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claimRequest}}}
	return pod
}

// claimAllocation returns the devices of the claim's allocation by this driver, empty while
// it is not allocated.
func claimAllocation(claim *resourcev1.ResourceClaim) []string {
	if claim.Status.Allocation == nil {
		return nil
	}
	var devices []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == contract.DRADriverName {
			devices = append(devices, r.Device)
		}
	}
	return devices
}

// claimAllocated waits until the named claim is allocated exactly want.
func claimAllocated(c client.Client, name *string, want string) condition {
	return func(ctx context.Context) (bool, string, error) {
		if *name == "" {
			return false, "no claim yet", nil
		}
		var claim resourcev1.ResourceClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: *name}, &claim); err != nil {
			return false, "", fmt.Errorf("getting ResourceClaim %s: %w", *name, err)
		}
		got := claimAllocation(&claim)
		return len(got) == 1 && got[0] == want, fmt.Sprintf("ResourceClaim %s allocated %v", *name, got), nil
	}
}

func (d *dev) runClaimPod(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if err := d.c.Create(reqCtx, gopherClaim()); err != nil {
			return "", fmt.Errorf("creating ResourceClaim %s: %w", ClaimName, err)
		}
		if err := d.c.Create(reqCtx, claimPod()); err != nil {
			return "", fmt.Errorf("creating pod %s: %w", ClaimPodName, err)
		}
		if err := d.waitFor(ctx, ClaimPodName+" to be bound to "+NodeName, []string{schedulerName}, podBound(d.c, ClaimPodName)); err != nil {
			return "", err
		}
		name := ClaimName
		what := fmt.Sprintf("the scheduler to allocate %s to ResourceClaim %s", DRAGopherID2, ClaimName)
		if err := d.waitFor(ctx, what, []string{schedulerName}, claimAllocated(d.c, &name, DRAGopherID2)); err != nil {
			return "", err
		}
		return fmt.Sprintf("bound to %s, claim allocated %s", NodeName, DRAGopherID2), nil
	}
}

// runDRALimitsPod creates PodName, which asks for one gopher with plain limits.
func (d *dev) runDRALimitsPod(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		if _, err := createPod(ctx, d.c, PodName); err != nil {
			return "", err
		}
		if err := d.waitFor(ctx, PodName+" to be bound to "+NodeName, []string{schedulerName}, podBound(d.c, PodName)); err != nil {
			return "", err
		}
		var name string
		what := fmt.Sprintf("the scheduler to name %s's ResourceClaim in status.extendedResourceClaimStatus", PodName)
		if err := d.waitFor(ctx, what, []string{schedulerName}, func(ctx context.Context) (bool, string, error) {
			var pod corev1.Pod
			if err := d.c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: PodName}, &pod); err != nil {
				return false, "", fmt.Errorf("getting pod %s: %w", PodName, err)
			}
			if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
				name = st.ResourceClaimName
			}
			return name != "", "no extendedResourceClaimStatus", nil
		}); err != nil {
			return "", err
		}
		what = fmt.Sprintf("the scheduler to allocate %s to %s's ResourceClaim", GopherID, PodName)
		if err := d.waitFor(ctx, what, []string{schedulerName}, claimAllocated(d.c, &name, GopherID)); err != nil {
			return "", err
		}
		return fmt.Sprintf("bound to %s, claim %s allocated %s", NodeName, name, GopherID), nil
	}
}

// DRAObserved is what the DRA demo printed, as the checks of --exit-after-demo read it.
type DRAObserved struct {
	// Slices is `kubectl get resourceslices`.
	Slices *metav1.Table
	// SliceDevices are the devices of the driver's slices on the demo node.
	SliceDevices []string
	// Pods is `kubectl get pods -o wide`.
	Pods *metav1.Table
	// Allocated maps each pod to the devices its claim was allocated (the claim of
	// status.extendedResourceClaimStatus for a pod without claims).
	Allocated map[string][]string
	// NodeCapacity is the node's status.capacity of the resource: empty, DRA serves it.
	NodeCapacity string
}

// observeDRA reads the claims of the DRA demo's pods.
func (d *dev) observeDRA(ctx context.Context, obs *DRAObserved) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var err error
	if obs.SliceDevices, err = sliceDevices(ctx, d.c); err != nil {
		return err
	}
	obs.Allocated = map[string][]string{}
	for _, name := range []string{PodName, ClaimPodName} {
		var pod corev1.Pod
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: name}, &pod); err != nil {
			return fmt.Errorf("getting pod %s: %w", name, err)
		}
		var claims []string
		for _, rc := range pod.Spec.ResourceClaims {
			if rc.ResourceClaimName != nil {
				claims = append(claims, *rc.ResourceClaimName)
			}
		}
		if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
			claims = append(claims, st.ResourceClaimName)
		}
		for _, cn := range claims {
			var claim resourcev1.ResourceClaim
			if err := d.c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: cn}, &claim); err != nil {
				return fmt.Errorf("getting ResourceClaim %s: %w", cn, err)
			}
			obs.Allocated[name] = append(obs.Allocated[name], claimAllocation(&claim)...)
		}
	}
	obs.NodeCapacity, _, err = nodeResource(ctx, d.c)
	return err
}

// draTableQueries are the kubectl commands the DRA demo prints.
var draTableQueries = []struct {
	TableQuery
	into func(*DRAObserved) **metav1.Table
}{
	{
		TableQuery: TableQuery{Command: "kubectl get nodedevices", Path: "/apis/kubedevice.io/v1alpha1/nodedevices",
			Empty: "No resources found"},
	},
	{
		TableQuery: TableQuery{Command: "kubectl get resourceslices", Path: "/apis/resource.k8s.io/v1/resourceslices",
			Empty: "No resources found"},
		into: func(o *DRAObserved) **metav1.Table { return &o.Slices },
	},
	{
		TableQuery: TableQuery{Command: "kubectl get resourceclaims", Path: "/apis/resource.k8s.io/v1/namespaces/" + PodNamespace + "/resourceclaims",
			Empty: "No resources found in " + PodNamespace + " namespace."},
	},
	{
		TableQuery: TableQuery{Command: "kubectl get pods -o wide", Path: "/api/v1/namespaces/" + PodNamespace + "/pods",
			Options: RenderOptions{Wide: true}, Empty: "No resources found in " + PodNamespace + " namespace."},
		into: func(o *DRAObserved) **metav1.Table { return &o.Pods },
	},
}

// showDRA prints the kubectl tables of the DRA demo and the device each pod was allocated.
func (d *dev) showDRA(ctx context.Context) (DRAObserved, error) {
	w := d.opts.Out
	var obs DRAObserved
	for _, q := range draTableQueries {
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		t, err := GetTable(reqCtx, d.rc, q.Path, q.FieldSelector)
		cancel()
		if err != nil {
			return obs, err
		}
		if q.into != nil {
			*q.into(&obs) = t
		}
		fmt.Fprintf(w, "\n$ %s\n", q.Command)
		if len(t.Rows) == 0 {
			fmt.Fprintln(w, q.Empty)
			continue
		}
		if err := RenderTable(w, t, q.Options); err != nil {
			return obs, err
		}
	}
	if err := d.observeDRA(ctx, &obs); err != nil {
		return obs, err
	}
	fmt.Fprintf(w, "\nAllocated by kube-scheduler (the claims' status.allocation):\n")
	fmt.Fprintf(w, "  %-18s %s  (plain limits; its claim is in status.extendedResourceClaimStatus)\n", PodName, orNone(strings.Join(obs.Allocated[PodName], ",")))
	fmt.Fprintf(w, "  %-18s %s  (ResourceClaim %s, deviceID == %q)\n", ClaimPodName, orNone(strings.Join(obs.Allocated[ClaimPodName], ",")), ClaimName, DRAGopherID2)
	fmt.Fprintf(w, "Node %s advertises %s: capacity %s (DRA serves it; no node capacity).\n", NodeName, ResourceName, orNone(obs.NodeCapacity))
	fmt.Fprintf(w, "No kubelet runs on %s: nothing prepares the claims (no NodePrepareResources, no CDI spec), so the NodeDevice\n"+
		"counts 0 allocated and no DeviceAllocation is written; no container starts, the pods stay Pending.\n", NodeName)
	return obs, nil
}

// CheckDRADemo returns what is wrong with the DRA demo's outcome, empty when it is what it should
// be: the slices list both gophers, both pods are bound to the node, the plain-limits pod's claim
// was allocated gopher-0 and gopher-claim gopher-1, and the node has no capacity of the resource.
func CheckDRADemo(o DRAObserved) []string {
	var problems []string
	if o.Slices == nil {
		problems = append(problems, "kubectl get resourceslices: not printed")
	} else if rows := matching(Rows(o.Slices), map[string]string{"NODE": NodeName, "DRIVER": contract.DRADriverName}); len(rows) != 1 {
		problems = append(problems, fmt.Sprintf("kubectl get resourceslices: %d rows of driver %s on %s, want 1", len(rows), contract.DRADriverName, NodeName))
	}
	if got, want := strings.Join(o.SliceDevices, ","), strings.Join(draGophers, ","); got != want {
		problems = append(problems, fmt.Sprintf("the ResourceSlices list devices %q, want %q", got, want))
	}
	if o.Pods == nil {
		problems = append(problems, "kubectl get pods -o wide: not printed")
	} else {
		for _, name := range []string{PodName, ClaimPodName} {
			rows := matching(Rows(o.Pods), map[string]string{"NAME": name})
			if len(rows) != 1 {
				problems = append(problems, fmt.Sprintf("kubectl get pods -o wide: %d rows of %s, want 1", len(rows), name))
				continue
			}
			problems = append(problems, expectCells("pod "+name, rows[0], []cellWant{{"NODE", NodeName}})...)
		}
	}
	for _, pw := range []struct{ pod, want string }{{PodName, GopherID}, {ClaimPodName, DRAGopherID2}} {
		if got := strings.Join(o.Allocated[pw.pod], ","); got != pw.want {
			problems = append(problems, fmt.Sprintf("pod %s's claim is allocated %q, want %q", pw.pod, got, pw.want))
		}
	}
	if o.NodeCapacity != "" {
		problems = append(problems, fmt.Sprintf("node %s: status.capacity[%s] is %q, want none: DRA serves it", NodeName, ResourceName, o.NodeCapacity))
	}
	return problems
}

// checkDRA prints the outcome of the DRA demo's checks and fails when any failed.
func (d *dev) checkDRA(obs DRAObserved) error {
	return d.report("the DRA demo", CheckDRADemo(obs), fmt.Sprintf(
		"the ResourceSlices of %s list %s; %s (plain limits) is bound to %s and allocated %s; "+
			"%s is bound to %s and %s allocated %s; the node advertises no %s.",
		contract.DRADriverName, strings.Join(draGophers, ", "), PodName, NodeName, GopherID,
		ClaimPodName, NodeName, ClaimName, DRAGopherID2, ResourceName))
}
