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

package dra

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
)

// SetupWithdrawal adds to mgr, for an agent that serves no resource through DRA, the removal of
// the ResourceSlices an earlier run of the agent on node published as kubedevice.io (the
// resources were switched back to node capacity, or DRA turned off): left behind, they would
// offer devices no driver on the node prepares. It runs once the agent has started. A cluster
// without resource.k8s.io/v1 has none to remove.
func SetupWithdrawal(mgr ctrl.Manager, node string, gate *kube.Gate) error {
	return mgr.Add(NewWithdrawal(mgr, node, gate))
}

// NewWithdrawal returns the removal SetupWithdrawal adds to mgr, for a caller that starts it
// itself (as New does for the DRA flow).
func NewWithdrawal(mgr ctrl.Manager, node string, gate *kube.Gate) manager.Runnable {
	return &withdrawal{node: node, gate: gate, reader: mgr.GetAPIReader(), client: mgr.GetClient()}
}

type withdrawal struct {
	node   string
	gate   *kube.Gate
	reader client.Reader
	client client.Client
}

func (*withdrawal) NeedLeaderElection() bool { return false }

func (w *withdrawal) Start(ctx context.Context) error {
	if err := w.gate.Wait(ctx); err != nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithName("dra")
	list := &resourceapi.ResourceSliceList{}
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", w.node), fields.OneTermEqualSelector("spec.driver", DriverName))
	if err := w.reader.List(ctx, list, client.MatchingFieldsSelector{Selector: sel}); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil
		}
		// Not fatal: the agent serves the device plugin path whatever happens to old slices.
		logger.Error(err, "Listing the node's ResourceSlices of the DRA driver, to remove them")
		return nil
	}
	for i := range list.Items {
		s := &list.Items[i]
		if err := w.client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			logger.Error(fmt.Errorf("deleting ResourceSlice %s: %w", s.Name, err), "Removing a ResourceSlice of the DRA driver, which no resource is served through any more")
			continue
		}
		logger.Info("Removed a ResourceSlice of the DRA driver: no resource is served through DRA any more", "resourceSlice", s.Name, "pool", s.Spec.Pool.Name)
	}
	return nil
}
