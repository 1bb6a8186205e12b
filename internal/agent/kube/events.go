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

package kube

// EventAction returns the action of an event reported once per distinct note: action followed by
// a hash of note. The events.k8s.io recorder counts the events of one type, reason, action,
// regarding and related object as a single series, which shows only the first note: with the
// note's hash in the action, a refusal that says something else is an event of its own, while the
// same refusal again counts on its series.
func EventAction(action, note string) string {
	return action + "-" + shortHash(note)
}
