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

package mirror

import (
	"slices"
	"sync"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// Cordoner takes the administrators' cordons: the devices of a resource that nothing new may be
// allocated from. The core (*nodeagent.Manager) is one.
type Cordoner interface {
	SetCordons(resource string, ids []string)
}

// cordonPush is the mirror's one write into the core: NodeDevice.spec.cordons, read from every
// shard of a resource, handed to the core when they changed since the last time. It runs in the
// mirror's reconcile, before the core is read, so the status written next already counts them.
type cordonPush struct {
	to Cordoner

	mu sync.Mutex
	// last are the cordons last handed to the core, per resource.
	last map[string][]string
}

func newCordonPush(to Cordoner) *cordonPush {
	return &cordonPush{to: to, last: map[string][]string{}}
}

// push hands the cordons of objs, resource's NodeDevices, to the core when they changed.
func (p *cordonPush) push(resource string, objs []kdv1alpha1.NodeDevice) {
	if p.to == nil {
		return
	}
	ids := CordonedIDs(objs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.last[resource]; ok && slices.Equal(prev, ids) {
		return
	}
	p.to.SetCordons(resource, ids)
	p.last[resource] = ids
}

// forget drops what was handed for a resource the core removed.
func (p *cordonPush) forget(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, resource)
}

// CordonedIDs returns the device IDs cordoned by any of the objects, sorted, without duplicates.
func CordonedIDs(objs []kdv1alpha1.NodeDevice) []string {
	var ids []string
	for i := range objs {
		for _, c := range objs[i].Spec.Cordons {
			ids = append(ids, c.DeviceID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
