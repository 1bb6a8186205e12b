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

// Package remediation takes pods off devices: a device's holders found from the DeviceAllocations,
// the cordons of NodeDevice.spec.cordons written and removed, and the holders evicted through the
// Eviction API (policy/v1), so PodDisruptionBudgets are respected.
//
// Two callers use it. `kubedevice drain` and `kubedevice uncordon` (Drain, Uncordon) run with the
// user's own credentials, like kubectl drain at device granularity: Drain cordons the devices, then
// evicts their holders with k8s.io/kubectl/pkg/drain (the library kubectl drain uses: a 429 from a
// blocking PodDisruptionBudget is retried until the timeout, and each pod is awaited until it is
// gone). The controller's remediation policy (internal/controller) reads Policy, set with its
// --remediate flags, and Holders; it evicts one pod per call, without waiting, at the rate Limits
// allow.
//
// A cordon is honoured from every shard of a resource (the agent reads them all), so Drain puts it
// on the shard that lists the device, and Uncordon takes it off every shard.
package remediation
