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

package nri

import (
	"cmp"
	"slices"
	"strings"
	"sync"
)

// notRunYet is why a container is refused when no PreStartContainer ran for its start and none
// failed.
const notRunYet = "PreStartContainer has not run for this start yet"

// Grants records, for each container of a pod whose devices come from a plugin that requires
// PreStartContainer before every start, whether the call was made for its next start. The kubelet
// makes it inside container start; the runtime's NRI hook must answer from memory, so the agent
// makes the call ahead of the start and the hook only checks this record:
//
//   - a PreStartContainer that succeeds grants one start (Grant): at allocation, for the first
//     start; when the pod's status shows that the container ended and will be restarted; or when
//     a creation was refused for want of a grant;
//   - a container creation takes the grant (admit), remembering the runtime's container ID, so the
//     same creation asked again is admitted again;
//   - a creation with no grant is refused, and the agent is asked to make the call (the function
//     given to NewGrants), so the kubelet's retry of the creation gets through. A failed call is
//     recorded (Fail): creations are refused with its error until a call succeeds.
//
// Containers are keyed by the UID the runtime knows their pod by and the container name. The
// record is in memory only: after an agent restart, a container being created finds no grant, is
// refused once, and gets through at the kubelet's retry. Containers already running are never
// affected. Grants is safe for concurrent use; a nil *Grants requires nothing.
type Grants struct {
	// request is called, outside the lock, when a creation is refused for want of a grant.
	request func(namespace, name string)

	mu sync.RWMutex
	// required are the resources whose plugin requires PreStartContainer.
	required map[string]bool
	// pods hold the grants of each pod's containers, by container name.
	pods podTable[map[string]*grant]
}

// grant is the PreStartContainer state of one container.
type grant struct {
	// granted: a PreStartContainer succeeded that no container creation has taken yet.
	granted bool
	// requested: the agent must call PreStartContainer: a creation was refused for want of a
	// grant, or the last call failed.
	requested bool
	// failure is the error of the last call, until one succeeds.
	failure string
	// admitted is the runtime's ID of the last container created with a grant.
	admitted string
	// preparedFor names the ended container whose restart the last call prepared (its
	// runtime ID; see Wants).
	preparedFor string
}

// NewGrants returns an empty record. request, if not nil, is called when a container creation is
// refused for want of a grant, with the pod's namespace and name; it must not block.
func NewGrants(request func(namespace, name string)) *Grants {
	return &Grants{
		request:  request,
		required: map[string]bool{},
		pods:     newPodTable[map[string]*grant](),
	}
}

// SetRequired records whether the plugin of resource requires PreStartContainer.
func (g *Grants) SetRequired(resource string, required bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if required {
		g.required[resource] = true
	} else {
		delete(g.required, resource)
	}
}

// Required reports whether the plugin of any of resources requires PreStartContainer.
func (g *Grants) Required(resources []string) bool {
	if g == nil || len(resources) == 0 {
		return false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, r := range resources {
		if g.required[r] {
			return true
		}
	}
	return false
}

// Grant records that PreStartContainer succeeded for the next start of container: the start
// of a container that has not run yet (ended empty), or the restart of the one that ended (its
// runtime ID, or any name that identifies it).
func (g *Grants) Grant(namespace, name, uid, container, ended string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.containerLocked(namespace, name, uid, container)
	c.granted, c.requested, c.failure, c.preparedFor = true, false, "", ended
}

// Fail records that PreStartContainer failed for container with message: its creations are
// refused with it, and the call is to be made again. It reports whether the message differs
// from the last failure's.
func (g *Grants) Fail(namespace, name, uid, container, message string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.containerLocked(namespace, name, uid, container)
	changed := c.failure != message
	c.requested, c.failure = true, message
	return changed
}

// Cause says why the agent should call PreStartContainer for a container.
type Cause string

// The causes of Wants.
const (
	// CauseNone: no call is needed.
	CauseNone Cause = ""
	// CauseCreation: a creation of the container was refused for want of a grant.
	CauseCreation Cause = "creation"
	// CauseRetry: the last call failed.
	CauseRetry Cause = "retry"
	// CauseRestart: the container ended, the kubelet will restart it, and no call prepared
	// that restart yet.
	CauseRestart Cause = "restart"
)

// Wants says whether, and why, the agent should call PreStartContainer for container now, where
// ended identifies the container that ended and that the kubelet will restart, as the pod's
// status shows it (empty: none). It should when a creation asked for it or the last call failed,
// and when a container ended whose restart no call prepared yet; but not when the runtime already
// admitted a container newer than the one that ended: a status that lags behind must not prepare
// a start that happened, while the container runs.
func (g *Grants) Wants(uid, container, ended string) Cause {
	g.mu.RLock()
	defer g.mu.RUnlock()
	containers, _ := g.pods.get(uid)
	c := containers[container]
	switch {
	case c == nil && ended != "":
		return CauseRestart
	case c == nil:
		return CauseNone
	case c.requested && c.failure != "":
		return CauseRetry
	case c.requested:
		return CauseCreation
	case ended == "" || ended == c.preparedFor:
		return CauseNone
	case c.admitted == "" || c.admitted == ended:
		return CauseRestart
	default:
		return CauseNone
	}
}

// Has reports whether anything is recorded for container: a grant, a creation, a request or a
// failure.
func (g *Grants) Has(uid, container string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	containers, _ := g.pods.get(uid)
	return containers[container] != nil
}

// PendingPod is a pod with containers whose PreStartContainer call is to be made (Pending).
type PendingPod struct {
	// UID is the UID the runtime knows the pod by; Namespace and Name are the pod's.
	UID, Namespace, Name string
	// Containers are the names of the containers whose call is to be made, sorted.
	Containers []string
}

// Pending lists, sorted by namespace, name and UID, the pods with containers whose
// PreStartContainer call is to be made: a creation was refused for want of a grant, or the last
// call failed (Wants says CauseCreation or CauseRetry). A failed call is retried with backoff;
// the agent retries at once those that waited for a plugin that has just registered.
func (g *Grants) Pending() []PendingPod {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []PendingPod
	for uid, rec := range g.pods.byUID {
		var containers []string
		for name, c := range rec.value {
			if c.requested {
				containers = append(containers, name)
			}
		}
		if len(containers) > 0 {
			slices.Sort(containers)
			out = append(out, PendingPod{UID: uid, Namespace: rec.namespace, Name: rec.name, Containers: containers})
		}
	}
	slices.SortFunc(out, func(a, b PendingPod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.UID, b.UID))
	})
	return out
}

// Forget drops the grants of the pods recorded under namespace/name, except the one with UID keep
// (empty: all of them).
func (g *Grants) Forget(namespace, name, keep string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pods.forget(namespace, name, keep)
}

// Len returns the number of pods with a record.
func (g *Grants) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.pods.len()
}

// admit decides the creation of container id of a pod: admitted if it takes a grant, or was
// admitted before under the same ID; else refused, with why, and the agent asked to call
// PreStartContainer.
func (g *Grants) admit(namespace, name, uid, container, id string) (why string, ok bool) {
	g.mu.Lock()
	c := g.containerLocked(namespace, name, uid, container)
	switch {
	case id != "" && id == c.admitted:
		ok = true
	case c.granted:
		c.granted, c.admitted = false, id
		ok = true
	default:
		c.requested = true
		why = notRunYet
		if c.failure != "" {
			why = c.failure
		}
	}
	g.mu.Unlock()
	if !ok && g.request != nil {
		g.request(namespace, name)
	}
	return why, ok
}

func (g *Grants) containerLocked(namespace, name, uid, container string) *grant {
	containers, ok := g.pods.getIn(uid, namespace, name)
	if !ok {
		containers = map[string]*grant{}
		g.pods.put(uid, namespace, name, containers)
	}
	c := containers[container]
	if c == nil {
		c = &grant{}
		containers[container] = c
	}
	return c
}

// RuntimeContainerID returns the runtime's ID of a container from the ID the kubelet reports in
// the pod's status (<runtime>://<id>), which is the ID NRI shows.
func RuntimeContainerID(statusID string) string {
	if _, id, ok := strings.Cut(statusID, "://"); ok {
		return id
	}
	return statusID
}
