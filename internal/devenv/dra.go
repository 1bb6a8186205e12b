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
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/agent/dra"
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

// draResources are the resources the agent serves through DRA: the Gopher's with --dra, and
// every --plugin-dra.
func (d *dev) draResources() []string {
	var res []string
	if d.opts.DRA {
		res = append(res, ResourceName)
	}
	return append(res, d.opts.PluginDRA...)
}

// draAgentArgs are the agent's DRA flags: every directory the dev cluster's own. No kubelet
// watches the registry directory, so the driver's registration is never taken up; the
// ResourceSlices go straight to the API server.
func (d *dev) draAgentArgs() []string {
	res := d.draResources()
	if len(res) == 0 {
		return nil
	}
	return []string{
		"--dra-resources=" + strings.Join(res, ","),
		"--kubelet-plugins-dir=" + d.l.kubeletPluginsDir(),
		"--kubelet-registry-dir=" + d.l.draRegistryDir(),
		"--cdi-dir=" + d.l.cdiDir(),
	}
}

// runDRA publishes the gophers as ResourceSlices and has the scheduler allocate one to a claim's
// pod and one to a pod with plain limits.
func (d *dev) runDRA(ctx context.Context) error {
	p := d.p
	if err := p.run("Publishing "+ResourceName+" through DRA", d.waitDRA(ctx, ResourceName, pluginName, draGophers)); err != nil {
		return err
	}
	if err := p.run("Creating "+ClaimName+" and "+ClaimPodName, d.runClaimPod(ctx)); err != nil {
		return err
	}
	return p.run("Creating "+PodName+" (plain limits)", d.runDRALimitsPod(ctx))
}

// sliceDevices returns the devices of the driver's ResourceSlices on the demo node in the pool
// of resource res.
func sliceDevices(ctx context.Context, c client.Client, res string) ([]string, error) {
	var list resourcev1.ResourceSliceList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	var devices []string
	for _, s := range list.Items {
		if s.Spec.Driver == contract.DRADriverName && ptr.Deref(s.Spec.NodeName, "") == NodeName && s.Spec.Pool.Name == dra.PoolName(res) {
			for _, dev := range s.Spec.Devices {
				devices = append(devices, dev.Name)
			}
		}
	}
	return devices, nil
}

// waitDRA waits until the driver's ResourceSlices list the devices of res (want, or as many as
// its NodeDevices when want is nil) and the controller has made a DeviceClass for it.
func (d *dev) waitDRA(ctx context.Context, res, plugin string, want []string) func() (string, error) {
	return func() (string, error) {
		what := fmt.Sprintf("the ResourceSlices of %s on %s to list the devices of %s", contract.DRADriverName, NodeName, res)
		var devices []string
		if err := d.waitFor(ctx, what, []string{agentName, plugin}, func(ctx context.Context) (bool, string, error) {
			var err error
			if devices, err = sliceDevices(ctx, d.c, res); err != nil {
				return false, "", err
			}
			seen := fmt.Sprintf("devices %v", devices)
			if want != nil {
				return slices.Equal(devices, want), seen + fmt.Sprintf(", want %v", want), nil
			}
			all, err := servedResources(ctx, d.c)
			if err != nil || all[res] == nil {
				return false, seen, err
			}
			return len(devices) > 0 && int64(len(devices)) == all[res].capacity, seen + "; NodeDevices " + all[res].String(), nil
		}); err != nil {
			return "", err
		}
		what = fmt.Sprintf("kubedevice-controller to create a DeviceClass with extendedResourceName %s", res)
		var class string
		if err := d.waitFor(ctx, what, []string{controllerName}, func(ctx context.Context) (bool, string, error) {
			var err error
			class, err = deviceClassOf(ctx, d.c, res)
			return class != "", "no such DeviceClass", err
		}); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d devices in ResourceSlices, DeviceClass %s", len(devices), class), nil
	}
}

// deviceClassOf returns the DeviceClass whose extendedResourceName is res, empty when none is.
func deviceClassOf(ctx context.Context, c client.Client, res string) (string, error) {
	var classes resourcev1.DeviceClassList
	if err := c.List(ctx, &classes); err != nil {
		return "", fmt.Errorf("listing DeviceClasses: %w", err)
	}
	for _, dc := range classes.Items {
		if ptr.Deref(dc.Spec.ExtendedResourceName, "") == res {
			return dc.Name, nil
		}
	}
	return "", nil
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

// claimAllocation returns the devices of the claim's allocation by this driver in the pool of
// res, empty while it is not allocated.
func claimAllocation(claim *resourcev1.ResourceClaim, res string) []string {
	if claim.Status.Allocation == nil {
		return nil
	}
	var devices []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == contract.DRADriverName && r.Pool == dra.PoolName(res) {
			devices = append(devices, r.Device)
		}
	}
	return devices
}

// claimAllocated waits until the named claim is allocated one device of res: want, or any
// when want is empty. It records the allocation in got.
func claimAllocated(c client.Client, name *string, res, want string, got *[]string) condition {
	return func(ctx context.Context) (bool, string, error) {
		if *name == "" {
			return false, "no claim yet", nil
		}
		var claim resourcev1.ResourceClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: *name}, &claim); err != nil {
			return false, "", fmt.Errorf("getting ResourceClaim %s: %w", *name, err)
		}
		*got = claimAllocation(&claim, res)
		ok := len(*got) == 1 && (want == "" || (*got)[0] == want)
		return ok, fmt.Sprintf("ResourceClaim %s allocated %v", *name, *got), nil
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
		var got []string
		what := fmt.Sprintf("the scheduler to allocate %s to ResourceClaim %s", DRAGopherID2, ClaimName)
		if err := d.waitFor(ctx, what, []string{schedulerName}, claimAllocated(d.c, &name, ResourceName, DRAGopherID2, &got)); err != nil {
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
		name, _, err := d.waitExtendedClaim(ctx, PodName, ResourceName, GopherID)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("bound to %s, claim %s allocated %s", NodeName, name, GopherID), nil
	}
}

// waitExtendedClaim waits until the scheduler has named the claim of a pod asking for res with
// plain limits (status.extendedResourceClaimStatus) and allocated it one device of res (want,
// or any when empty); it returns the claim and its devices.
func (d *dev) waitExtendedClaim(ctx context.Context, pod, res, want string) (string, []string, error) {
	var name string
	what := fmt.Sprintf("the scheduler to name %s's ResourceClaim in status.extendedResourceClaimStatus", pod)
	if err := d.waitFor(ctx, what, []string{schedulerName}, func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: pod}, &p); err != nil {
			return false, "", fmt.Errorf("getting pod %s: %w", pod, err)
		}
		if st := p.Status.ExtendedResourceClaimStatus; st != nil {
			name = st.ResourceClaimName
		}
		return name != "", "no extendedResourceClaimStatus", nil
	}); err != nil {
		return "", nil, err
	}
	var got []string
	what = fmt.Sprintf("the scheduler to allocate one %s to %s's ResourceClaim", res, pod)
	if want != "" {
		what = fmt.Sprintf("the scheduler to allocate %s to %s's ResourceClaim", want, pod)
	}
	if err := d.waitFor(ctx, what, []string{schedulerName}, claimAllocated(d.c, &name, res, want, &got)); err != nil {
		return "", nil, err
	}
	return name, got, nil
}

// extendedAllocation returns the claim kube-scheduler made for a pod asking for res with plain
// limits (status.extendedResourceClaimStatus), and the devices of res allocated to it.
func extendedAllocation(ctx context.Context, c client.Client, pod, res string) (string, []string, error) {
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: pod}, &p); err != nil {
		return "", nil, fmt.Errorf("getting pod %s: %w", pod, err)
	}
	st := p.Status.ExtendedResourceClaimStatus
	if st == nil {
		return "", nil, nil
	}
	var claim resourcev1.ResourceClaim
	if err := c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: st.ResourceClaimName}, &claim); err != nil {
		return "", nil, fmt.Errorf("getting ResourceClaim %s: %w", st.ResourceClaimName, err)
	}
	return st.ResourceClaimName, claimAllocation(&claim, res), nil
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
	if obs.SliceDevices, err = sliceDevices(ctx, d.c, ResourceName); err != nil {
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
			obs.Allocated[name] = append(obs.Allocated[name], claimAllocation(&claim, ResourceName)...)
		}
	}
	obs.NodeCapacity, _, err = nodeResource(ctx, d.c, ResourceName)
	return err
}

// draTableQueries are the kubectl commands the DRA demo prints, and where its checks find them.
var draTableQueries = []struct {
	TableQuery
	into func(*DRAObserved) **metav1.Table
}{
	{TableQuery: nodeDevicesQuery},
	{TableQuery: slicesQuery, into: func(o *DRAObserved) **metav1.Table { return &o.Slices }},
	{TableQuery: claimsQuery},
	// The device plugin path's allocations, of the author's resources that take it.
	{TableQuery: allocationsQuery},
	{TableQuery: podsQuery, into: func(o *DRAObserved) **metav1.Table { return &o.Pods }},
}

// showDRA prints the kubectl tables of the DRA demo, the device each pod was allocated, and
// what the node advertises of each resource.
func (d *dev) showDRA(ctx context.Context) (DRAObserved, error) {
	w := d.opts.Out
	var obs DRAObserved
	for _, q := range draTableQueries {
		t, err := d.printTable(ctx, q.TableQuery)
		if err != nil {
			return obs, err
		}
		if q.into != nil {
			*q.into(&obs) = t
		}
	}
	if err := d.observeDRA(ctx, &obs); err != nil {
		return obs, err
	}
	fmt.Fprintf(w, "\nAllocated by kube-scheduler (the claims' status.allocation):\n")
	fmt.Fprintf(w, "  %-18s %s  (plain limits; its claim is in status.extendedResourceClaimStatus)\n", PodName, orNone(strings.Join(obs.Allocated[PodName], ",")))
	fmt.Fprintf(w, "  %-18s %s  (ResourceClaim %s, deviceID == %q)\n", ClaimPodName, orNone(strings.Join(obs.Allocated[ClaimPodName], ",")), ClaimName, DRAGopherID2)
	if _, _, err := d.showAdvertised(ctx, ResourceName, ""); err != nil {
		return obs, err
	}
	if err := d.showAuthorResources(ctx); err != nil {
		return obs, err
	}
	fmt.Fprintf(w, "No kubelet runs on %s: nothing prepares the claims (no NodePrepareResources, no CDI spec), so the NodeDevices\n"+
		"of the resources DRA serves count 0 allocated and their claims get no DeviceAllocation; no container starts, the pods stay Pending.\n", NodeName)
	return obs, nil
}

// CheckDRADemo returns what is wrong with the DRA demo's outcome, empty when it is what it should
// be: the slices list both gophers, both pods are bound to the node, the plain-limits pod's claim
// was allocated gopher-0 and gopher-claim gopher-1, and the node has no capacity of the resource.
func CheckDRADemo(o DRAObserved) []string {
	var problems []string
	if o.Slices == nil {
		problems = append(problems, "kubectl get resourceslices: not printed")
	} else if rows := matching(Rows(o.Slices), map[string]string{"NODE": NodeName, "DRIVER": contract.DRADriverName, "POOL": ResourceName}); len(rows) != 1 {
		problems = append(problems, fmt.Sprintf("kubectl get resourceslices: %d rows of driver %s's pool %s on %s, want 1", len(rows), contract.DRADriverName, ResourceName, NodeName))
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
