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

package agent

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
)

// leaseRenewer keeps the agent's Lease, kubedevice-agent-<node> in the agent's namespace, held by
// the node name and renewed every LeaseRenewInterval once the agent is ready: the agent's only
// periodic write, from which the controller judges that the node's devices are being reported.
// The Lease is read from the API server, not cached, and written with the last version read.
type leaseRenewer struct {
	opts      Options
	gate      *kube.Gate
	client    client.Client
	apiReader client.Reader
	// lease is the last version written or read; nil when it must be read again.
	lease *coordinationv1.Lease
}

// NeedLeaderElection is false: every node's agent renews its own Lease.
func (*leaseRenewer) NeedLeaderElection() bool { return false }

// Start renews the Lease until ctx ends. A failed renewal is logged and tried again at the next
// tick: the Lease stays valid for several intervals.
func (l *leaseRenewer) Start(ctx context.Context) error {
	logger := ctrl.LoggerFrom(ctx).WithName("lease").WithValues("lease", klog.KRef(l.opts.Namespace, LeaseName(l.opts.NodeName)))
	ctx = ctrl.LoggerInto(ctx, logger)
	if l.gate.Wait(ctx) != nil {
		return nil // The manager stopped before the agent was ready.
	}
	ticker := l.opts.Clock.NewTicker(l.opts.LeaseRenewInterval)
	defer ticker.Stop()
	for {
		if err := l.renew(ctx); err != nil {
			logger.Error(err, "Renewing the agent Lease")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// renew creates the Lease or moves its renewTime to now.
func (l *leaseRenewer) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.LeaseRenewInterval)
	defer cancel()
	now := metav1.NewMicroTime(l.opts.Clock.Now())
	if l.lease == nil {
		lease := &coordinationv1.Lease{}
		err := l.apiReader.Get(ctx, client.ObjectKey{Namespace: l.opts.Namespace, Name: LeaseName(l.opts.NodeName)}, lease)
		if apierrors.IsNotFound(err) {
			return l.create(ctx, now)
		}
		if err != nil {
			return fmt.Errorf("getting the agent Lease: %w", err)
		}
		l.lease = lease
	}
	lease := l.lease.DeepCopy()
	lease.Spec.HolderIdentity = ptr.To(l.opts.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(l.opts.LeaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	if err := l.client.Update(ctx, lease, client.FieldOwner(FieldOwner)); err != nil {
		// A conflict or a deleted Lease: read it again next time.
		l.lease = nil
		return fmt.Errorf("renewing the agent Lease: %w", err)
	}
	kube.CountWrite("Lease", "update")
	l.lease = lease
	return nil
}

func (l *leaseRenewer) create(ctx context.Context, now metav1.MicroTime) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.opts.Namespace, Name: LeaseName(l.opts.NodeName)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(l.opts.NodeName),
			LeaseDurationSeconds: ptr.To(int32(l.opts.LeaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	if err := l.client.Create(ctx, lease, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("creating the agent Lease: %w", err)
	}
	kube.CountWrite("Lease", "create")
	l.lease = lease
	return nil
}
