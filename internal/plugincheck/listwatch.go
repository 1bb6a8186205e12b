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

package plugincheck

import (
	"context"
	"fmt"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// checkListAndWatch opens the stream and checks its first list.
func (r *resourceRun) checkListAndWatch(ctx context.Context) bool {
	started := time.Now()
	s, err := openListStream(ctx, r.client)
	if err != nil {
		r.record(CheckFirstList, Fail, started, "ListAndWatch: "+err.Error())
		r.skipAll("no ListAndWatch stream", afterRegistration[1:]...)
		return false
	}
	r.stream = s
	msg, err := s.next(r.t.FirstList)
	if err != nil {
		r.record(CheckFirstList, Fail, started, err.Error())
		r.skipAll("no device list", afterRegistration[1:]...)
		return false
	}
	evidence := []string{fmt.Sprintf("first list after %s: %s", seconds(time.Since(started)), describeDevices(msg.GetDevices()))}
	r.devices = msg.GetDevices()
	evidence = append(evidence, r.settle(s, started)...)
	if len(evidence) > 1 {
		evidence = append(evidence, fmt.Sprintf("the checks use the latest list, as the kubelet does (lists %s apart or less are taken as one settling list)", seconds(r.t.ListSettle)))
	}
	r.record(CheckFirstList, Pass, started, evidence...)
	now := time.Now()
	ok := []string{fmt.Sprintf("%d devices, IDs valid and unique", len(r.devices))}
	if n := controlIDs(r.devices); n > 0 {
		ok = append(ok, fmt.Sprintf("%d IDs hold control characters: the kubelet accepts them (quoted here)", n))
	}
	r.verdict(CheckDeviceIDs, now, validateDeviceIDs(r.devices), ok...)
	r.verdict(CheckHealthValues, now, validateHealth(r.devices), "every health is Healthy or Unhealthy")
	return true
}

// settle reads the lists that follow the first within the settle window: the kubelet uses the
// latest list, and a plugin may send an empty list and its full list a moment later. r.devices
// becomes the latest; it returns a line per list read.
func (r *resourceRun) settle(s *listStream, started time.Time) []string {
	var evidence []string
	for range maxSettleMessages {
		next, err := s.next(r.t.ListSettle)
		if err != nil {
			break
		}
		r.devices = next.GetDevices()
		evidence = append(evidence, fmt.Sprintf("then, after %s: %s", seconds(time.Since(started)), describeDevices(r.devices)))
	}
	return evidence
}

func (r *resourceRun) healthy() []string {
	var ids []string
	seen := map[string]bool{}
	for _, d := range r.devices {
		if d.GetHealth() == v1beta1.Healthy && d.GetID() != "" && !seen[d.GetID()] {
			ids = append(ids, d.GetID())
			seen[d.GetID()] = true
		}
	}
	return ids
}
