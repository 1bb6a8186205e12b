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

package cleanup

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControllerState is how the wait for the controller ended.
type ControllerState string

// The ways the wait for the controller ends.
const (
	// ControllerNoLease: there is no leader election Lease, so no controller runs with leader
	// election; one that runs without it cannot be seen, and is not waited for.
	ControllerNoLease ControllerState = "no leader election Lease"
	// ControllerReleased: the Lease names no holder; a controller that stops releases it.
	ControllerReleased ControllerState = "Lease released"
	// ControllerExpired: the Lease was not renewed for its duration, so its holder is gone.
	ControllerExpired ControllerState = "Lease expired"
	// ControllerNotWaited: the wait was skipped (Options.Force).
	ControllerNotWaited ControllerState = "not waited for (--force)"
)

// leaseWatch judges a leader election Lease the way client-go's leader election does: its holder
// is gone when the Lease has not changed for leaseDurationSeconds, as this process observes it.
// Comparing renewTime with the local clock instead would trust the clocks of two machines to agree.
type leaseWatch struct {
	resourceVersion string
	changed         time.Time
}

// observe returns how the wait ends with lease (nil when there is none) read at now, or "" while
// a controller holds it.
func (w *leaseWatch) observe(lease *coordinationv1.Lease, now time.Time) ControllerState {
	switch {
	case lease == nil:
		return ControllerNoLease
	case ptr.Deref(lease.Spec.HolderIdentity, "") == "":
		return ControllerReleased
	}
	if lease.ResourceVersion != w.resourceVersion {
		w.resourceVersion, w.changed = lease.ResourceVersion, now
	}
	duration := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second
	if now.Sub(w.changed) > duration {
		return ControllerExpired
	}
	return ""
}

// waitForController waits until no controller holds the leader election Lease (released, expired
// or absent), at most opts.Timeout, and returns how the wait ended. While it waits it reads the
// Lease every opts.PollInterval.
func waitForController(ctx context.Context, c client.Reader, opts Options) (ControllerState, error) {
	logger := ctrl.LoggerFrom(ctx).WithValues("lease", opts.LeaseNamespace+"/"+opts.LeaseName)
	if opts.Force {
		logger.Info("Not waiting for the kubedevice controller to stop (forced)")
		return ControllerNotWaited, nil
	}
	key := client.ObjectKey{Namespace: opts.LeaseNamespace, Name: opts.LeaseName}
	deadline := opts.Clock.Now().Add(opts.Timeout)
	var watch leaseWatch
	waiting := false
	for {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, key, lease); apierrors.IsNotFound(err) {
			lease = nil
		} else if err != nil {
			return "", fmt.Errorf("getting the controller's leader election Lease %s: %w", key, err)
		}
		now := opts.Clock.Now()
		if state := watch.observe(lease, now); state != "" {
			switch state {
			case ControllerNoLease:
				logger.Info("No kubedevice controller holds the leader election Lease: there is none (a controller never led, or runs without leader election)")
			default:
				logger.Info("No kubedevice controller holds the leader election Lease", "state", state, "holder", ptr.Deref(lease.Spec.HolderIdentity, ""))
			}
			return state, nil
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if !now.Before(deadline) {
			return "", fmt.Errorf("%w: %s still holds the leader election Lease %s after %s (uninstall kubedevice first, or force)",
				ErrControllerRunning, holder, key, opts.Timeout)
		}
		if !waiting {
			logger.Info("Waiting for the kubedevice controller to stop", "holder", holder, "timeout", opts.Timeout)
			waiting = true
		}
		t := opts.Clock.NewTimer(min(opts.PollInterval, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("waiting for the kubedevice controller to stop: %w", ctx.Err())
		case <-t.C():
		}
	}
}
