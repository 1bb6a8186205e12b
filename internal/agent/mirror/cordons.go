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
