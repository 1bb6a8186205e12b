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
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// nodeTimeout bounds the read of the Node the slices are owned by.
const nodeTimeout = 10 * time.Second

// publisher is what publish hands the pools to: the library's *resourceslice.Controller.
type publisher interface {
	// Update sets the pools to publish; the controller writes what differs, in the background.
	Update(resources *resourceslice.DriverResources)
}

var _ publisher = &resourceslice.Controller{}

// sliceController is the library's ResourceSlice controller being started in the background.
//
// resourceslice.StartController returns only once its ResourceSlice informer has synced, and it
// checks for that every second, first right after starting the informer: starting it takes a
// second whatever the API server does. kubeletplugin.Helper.PublishResources starts it on the
// first publish, so that first publish (the first plugin's registration, or the restored state
// after a restart) reached the API server a second late. The flow starts it with the agent
// instead, so it has synced by the time the first plugin registers, and publishes through it
// directly (the Helper then manages no slices).
type sliceController struct {
	done  chan struct{}
	queue *heldQueue
	// c and err are StartController's results, set before done is closed.
	c   *resourceslice.Controller
	err error
}

// sliceSyncDelay is how long the slice controller waits after a change it hears of before it
// syncs the pool again, instead of the library's 30 s (resourceslice.DefaultSyncDelay): a kubelet
// deletes every ResourceSlice of its node when it starts (its DRA plugin manager's wipe, until the
// drivers register again), and with the default the node offered none of its devices to the
// scheduler for 30 s after every kubelet restart. A second is long enough for the informer to have
// seen the controller's own writes.
const sliceSyncDelay = time.Second

// startSliceController starts the controller of node's slices of the driver in the background,
// with no pools to publish: its queue holds its worker until the first Update through publisher,
// so it writes nothing before (heldQueue). It stops when ctx ends; stop waits for that.
func startSliceController(ctx context.Context, client kubernetes.Interface, node string) *sliceController {
	s := &sliceController{done: make(chan struct{}), queue: newHeldQueue()}
	go func() {
		defer close(s.done)
		ctx := klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), "resourceslices"))
		s.c, s.err = resourceslice.StartController(ctx, resourceslice.Options{
			DriverName: DriverName,
			KubeClient: client,
			Owner:      nodeOwner(ctx, client, node),
			SyncDelay:  ptr.To(sliceSyncDelay),
			Queue:      s.queue,
			// The default handler logs; publishing errors are retried by the controller and fixed
			// by nothing the agent could do (as kubeletplugin treats them: recoverable).
		})
	}()
	return s
}

// nodeOwner is the slices' owner, the Node, with its UID when it can be read now: otherwise the
// controller reads it at its first write.
func nodeOwner(ctx context.Context, client kubernetes.Interface, node string) *resourceslice.Owner {
	owner := &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node}
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	if n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		owner.UID = n.UID
	}
	return owner
}

// synced reports whether the controller has started (or failed to).
func (s *sliceController) synced() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// wait returns the controller once it has started, nil if ctx ends first, or a fatal error.
func (s *sliceController) wait(ctx context.Context, fatal <-chan error) (*resourceslice.Controller, error) {
	select {
	case <-ctx.Done():
		return nil, nil
	case err := <-fatal:
		return nil, err
	case <-s.done:
	}
	if s.err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("starting the ResourceSlice controller: %w", s.err)
	}
	return s.c, nil
}

// stop waits for the start to end and stops the controller; the start's context must have ended
// (or the controller started).
func (s *sliceController) stop() {
	<-s.done
	s.c.Stop()
}

// publisher is the started controller as publish's publisher: its Update releases the queue.
func (s *sliceController) publisher() publisher {
	return releasing{publisher: s.c, release: s.queue.release}
}

// releasing is a publisher whose Update releases the controller's queue once it has passed the
// pools on.
type releasing struct {
	publisher
	release func()
}

func (r releasing) Update(resources *resourceslice.DriverResources) {
	r.publisher.Update(resources)
	r.release()
}

// heldQueue is the slice controller's work queue (the library's default one), whose Get waits
// until release (or shut-down). The controller syncs every pool its informer lists a SyncDelay
// after listing it, and a pool it has not been given is removed: the slices an earlier run left,
// which the restored state publishes again. The informer lists as it starts, and StartController
// returns at its next check a second later, so that sync fell due milliseconds after the flow's
// first Update could come at the earliest; on a loaded node it came first, and the controller
// deleted the earlier run's slices (tainted by taintStale) and created them again: two more
// writes, and the node's DRA devices gone from the API in between. Held until the first Update,
// the worker finds the pools in every sync.
type heldQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	released, shutDown        chan struct{}
	releaseOnce, shutDownOnce sync.Once
}

func newHeldQueue() *heldQueue {
	return &heldQueue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_resource_slices"},
		),
		released: make(chan struct{}),
		shutDown: make(chan struct{}),
	}
}

// release lets the worker take items.
func (q *heldQueue) release() { q.releaseOnce.Do(func() { close(q.released) }) }

// Get waits until the queue is released or shut down, then gets the next item.
func (q *heldQueue) Get() (string, bool) {
	select {
	case <-q.released:
	case <-q.shutDown:
	}
	return q.TypedRateLimitingInterface.Get()
}

// ShutDown shuts the queue down, ending a Get that waits for the release.
func (q *heldQueue) ShutDown() {
	q.shutDownOnce.Do(func() { close(q.shutDown) })
	q.TypedRateLimitingInterface.ShutDown()
}

// ShutDownWithDrain is ShutDown, waiting for the items being processed.
func (q *heldQueue) ShutDownWithDrain() {
	q.shutDownOnce.Do(func() { close(q.shutDown) })
	q.TypedRateLimitingInterface.ShutDownWithDrain()
}

// publish publishes the pools of the DRA-served resources now and again whenever the core
// announces a change, until ctx ends (nil) or a fatal error arrives. Every change republishes all
// pools: building them is cheap, and the library writes only the slices that differ.
func publish(ctx context.Context, core Core, pub publisher, fatal <-chan error) error {
	logger := klog.FromContext(ctx)
	sub := core.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-sub.Ready():
		}
		changed := sub.Changed()
		resources, pools := driverResources(core.Snapshots())
		for name, p := range pools {
			if len(p.dropped) > 0 {
				logger.Error(errors.New("device names collide"), "Devices left out of the ResourceSlices", "pool", name, "deviceIDs", p.dropped)
			}
		}
		pub.Update(&resources)
		logger.V(4).Info("Published ResourceSlices", "pools", len(resources.Pools), "changed", changed)
	}
}
