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
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
)

// watchRegistrations queues, the moment a plugin registers (again), every pod with a container
// holding that plugin's devices whose PreStartContainer call is pending (nri.Grants.Pending: it
// failed while the plugin was away, or a creation asked for it), with its backoff forgotten: the
// call is made at once, so that the kubelet's next creation of the container finds its grant.
// Without it the call waited for its backoff (up to retryMaxDelay) or for that creation, which it
// then only prepared, refused: the container lost a step of the kubelet's own back-off (up to
// 5 minutes), which nothing the agent does can shorten. Changes that are not registrations
// (health, frees, cordons) leave the backoff alone.
func (r *preStartReconciler) watchRegistrations(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	sub := r.opts.Core.Subscribe()
	go func() {
		defer sub.Close()
		// serving is, per resource, the registration last seen serving it.
		serving := map[string]uint64{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Ready():
			}
			changed := sub.Changed()
			if err := r.opts.Gate.Wait(ctx); err != nil {
				return
			}
			registered := r.registered(changed, serving)
			if len(registered) == 0 {
				continue
			}
			for _, req := range r.pendingOn(ctx, registered) {
				r.backoff.Forget(req)
				q.Add(req)
			}
		}
	}()
}

// registered returns those of the changed resources that another plugin connection serves than
// when serving was last updated (a plugin registered, or, the newest one gone, an older one that
// is still connected serves it again), and updates serving. Only resources whose plugin requires
// PreStartContainer are looked at: no call is pending for the others (one that comes to require
// it is taken as registered at its next change: at worst one call made early). Runtime injection
// takes the plugin's requirement at once, so that the NRI hook admits containers by what the
// plugin now says.
func (r *preStartReconciler) registered(changed []string, serving map[string]uint64) []string {
	var out []string
	for _, res := range changed {
		if !r.grants.Required([]string{res}) {
			delete(serving, res)
			continue
		}
		snap, ok := r.opts.Core.Snapshot(res)
		if !ok || snap.Registration == 0 {
			delete(serving, res)
			continue
		}
		if serving[res] == snap.Registration {
			continue
		}
		serving[res] = snap.Registration
		r.RefreshPreStart(res)
		out = append(out, res)
	}
	return out
}

// pendingOn returns the requests of the pods, as cached, with a container holding devices of one
// of resources whose PreStartContainer call is pending.
func (r *preStartReconciler) pendingOn(ctx context.Context, resources []string) []reconcile.Request {
	var out []reconcile.Request
	for _, p := range r.grants.Pending() {
		pod, err := r.pods.Get(ctx, p.Namespace, p.Name)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Looking up a pod waiting for PreStartContainer", "pod", klog.KRef(p.Namespace, p.Name))
			continue
		}
		if pod == nil || kube.RuntimeUID(pod) != p.UID {
			continue
		}
		if slices.ContainsFunc(p.Containers, func(name string) bool {
			c := kube.ContainerNamed(pod, name)
			return c != nil && slices.ContainsFunc(kube.ContainerResources(c), func(res string) bool { return slices.Contains(resources, res) })
		}) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out
}
