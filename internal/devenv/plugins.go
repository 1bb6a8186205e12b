package devenv

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/plugincheck"
)

// authorPluginName is the component name, and log name, of the i-th --plugin.
func authorPluginName(i int) string { return fmt.Sprintf("plugin-%d", i+1) }

// authorPodName is the pod that asks for the i-th --plugin's resource.
func authorPodName(i int) string { return fmt.Sprintf("plugin-pod-%d", i+1) }

// startAuthorPlugins starts each --plugin command pointed at the agent's plugin directory, waits
// for the agent to publish its resource, and creates a pod asking for one device of it.
func (d *dev) startAuthorPlugins(ctx context.Context) error {
	known := []string{ResourceName}
	for i, command := range d.opts.Plugins {
		name := authorPluginName(i)
		var res string
		if err := d.p.run("Starting "+name+" ("+shorten(command)+")", func() (string, error) {
			mountAt := ""
			if d.opts.PluginMountNamespace {
				mountAt = plugincheck.KubeletPluginDir
			}
			argv, env, err := plugincheck.CommandLine([]string{"sh", "-c", command}, d.l.pluginDir(), mountAt)
			if err != nil {
				return "", err
			}
			c, err := startComponentEnv(name, argv[0], argv[1:], env, d.l.logPath(name))
			if err != nil {
				return "", err
			}
			d.comps = append(d.comps, c)
			what := fmt.Sprintf("%s to register a new resource with the agent on %s, with a healthy device", name, NodeName)
			var nd *kdv1alpha1.NodeDevice
			if err := d.waitFor(ctx, what, []string{name, agentName}, func(ctx context.Context) (bool, string, error) {
				var err error
				nd, err = newNodeDevice(ctx, d.c, known)
				if err != nil || nd == nil {
					return false, "no new NodeDevice", err
				}
				st := nd.Status
				ok := st.Plugin != nil && st.Plugin.State == kdv1alpha1.PluginStateRegistered && st.Allocatable > 0
				return ok, fmt.Sprintf("NodeDevice %s (%s): capacity %d, allocatable %d", nd.Name, nd.Spec.ResourceName, st.Capacity, st.Allocatable), nil
			}); err != nil {
				return "", err
			}
			res = nd.Spec.ResourceName
			known = append(known, res)
			return fmt.Sprintf("%s: %d devices, %d allocatable", res, nd.Status.Capacity, nd.Status.Allocatable), nil
		}); err != nil {
			return err
		}
		pod := authorPodName(i)
		if err := d.p.run("Creating "+pod+" asking for one "+res, func() (string, error) {
			p := authorPod(pod, corev1.ResourceName(res))
			reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
			err := d.c.Create(reqCtx, p)
			cancel()
			if err != nil {
				return "", fmt.Errorf("creating pod %s: %w", pod, err)
			}
			if err := d.waitFor(ctx, pod+" to be bound to "+NodeName, []string{schedulerName}, podBound(d.c, pod)); err != nil {
				return "", err
			}
			var held []string
			what := fmt.Sprintf("the DeviceAllocation of %s to hold one %s", pod, res)
			if err := d.waitFor(ctx, what, []string{agentName, name}, func(ctx context.Context) (bool, string, error) {
				var ok bool
				var seen string
				var err error
				ok, seen, held, err = allocationHoldsOne(ctx, d.c, p, res)
				return ok, seen, err
			}); err != nil {
				return "", err
			}
			return "bound to " + NodeName + ", holds " + strings.Join(held, ","), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// newNodeDevice returns a NodeDevice of the demo node whose resource is not among known.
func newNodeDevice(ctx context.Context, c client.Client, known []string) (*kdv1alpha1.NodeDevice, error) {
	var list kdv1alpha1.NodeDeviceList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": NodeName}); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of %s: %w", NodeName, err)
	}
	for i := range list.Items {
		if !slices.Contains(known, list.Items[i].Spec.ResourceName) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// allocationHoldsOne says whether the pod's DeviceAllocation is Allocated with one device of res.
func allocationHoldsOne(ctx context.Context, c client.Client, pod *corev1.Pod, res string) (bool, string, []string, error) {
	var list kdv1alpha1.DeviceAllocationList
	if err := c.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return false, "", nil, fmt.Errorf("listing DeviceAllocations: %w", err)
	}
	for _, da := range list.Items {
		if da.Spec.PodName != pod.Name || da.Spec.PodUID != string(pod.UID) {
			continue
		}
		cond := apimeta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
		held := heldDevices(&da)
		seen := fmt.Sprintf("DeviceAllocation %s holds [%s]", da.Name, strings.Join(held, " "))
		if cond != nil {
			seen += fmt.Sprintf(", Allocated=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		ok := cond != nil && cond.Status == metav1.ConditionTrue && len(held) == 1 && strings.HasPrefix(held[0], res+"/")
		return ok, seen, held, nil
	}
	return false, "no DeviceAllocation of " + pod.Name, nil, nil
}

// authorPod is a pod asking for one device of res.
func authorPod(name string, res corev1.ResourceName) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: PodNamespace,
			Labels:    map[string]string{"app.kubernetes.io/name": "plugin-demo"},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "busybox",
				Command: []string{"sh", "-c", "env; sleep 3600"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{res: one},
					Limits:   corev1.ResourceList{res: one},
				},
			}},
		},
	}
}

// shorten keeps a command line short enough for a progress line.
func shorten(s string) string {
	const maxLen = 32
	if len(s) <= maxLen {
		return s
	}
	return s[:maxLen-3] + "..."
}
