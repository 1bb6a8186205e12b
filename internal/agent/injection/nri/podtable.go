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

// podTable holds one record per pod, keyed by the UID the container runtime knows the pod by,
// and finds the records of a namespace/name: the key the agent's pod controller reconciles by, so
// that it can forget a pod that ended, disappeared, or was replaced by a pod of the same name.
// It is not safe for concurrent use: its owner guards it.
type podTable[T any] struct {
	byUID  map[string]podRecord[T]
	byName map[string]map[string]struct{}
}

// podRecord is a pod's record and the namespace/name it is filed under.
type podRecord[T any] struct {
	namespace, name string
	value           T
}

func newPodTable[T any]() podTable[T] {
	return podTable[T]{byUID: map[string]podRecord[T]{}, byName: map[string]map[string]struct{}{}}
}

// get returns the record of the pod with uid.
func (t *podTable[T]) get(uid string) (T, bool) {
	r, ok := t.byUID[uid]
	return r.value, ok
}

// getIn returns the record of the pod with uid if it is filed under namespace/name.
func (t *podTable[T]) getIn(uid, namespace, name string) (T, bool) {
	r, ok := t.byUID[uid]
	if !ok || r.namespace != namespace || r.name != name {
		var zero T
		return zero, false
	}
	return r.value, true
}

// put records v for the pod with uid, filed under namespace/name.
func (t *podTable[T]) put(uid, namespace, name string, v T) {
	if old, ok := t.byUID[uid]; ok && (old.namespace != namespace || old.name != name) {
		t.unfile(old.namespace+"/"+old.name, uid)
	}
	t.byUID[uid] = podRecord[T]{namespace: namespace, name: name, value: v}
	key := namespace + "/" + name
	if t.byName[key] == nil {
		t.byName[key] = map[string]struct{}{}
	}
	t.byName[key][uid] = struct{}{}
}

// forget drops the records filed under namespace/name, except the one of the pod with UID keep
// (empty: all of them).
func (t *podTable[T]) forget(namespace, name, keep string) {
	key := namespace + "/" + name
	for uid := range t.byName[key] {
		if uid != keep {
			delete(t.byUID, uid)
			t.unfile(key, uid)
		}
	}
}

func (t *podTable[T]) unfile(key, uid string) {
	delete(t.byName[key], uid)
	if len(t.byName[key]) == 0 {
		delete(t.byName, key)
	}
}

// len returns the number of pods with a record.
func (t *podTable[T]) len() int { return len(t.byUID) }
