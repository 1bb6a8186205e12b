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

// Package crash is the crash-injection harness: the agent (cmd/kubedevice-agent, built with the
// crashpoint tag) runs as a real process against envtest's kube-apiserver and etcd, with the
// Gopher device plugin (cmd/gopher-device-plugin) as a real process, and is killed with SIGKILL at
// each named point of the allocation and free paths (internal/crashpoint) and at random times
// while pods come and go; then it is started again and every run must converge:
//
//   - no device is held twice, in the checkpoint or by the DeviceAllocations;
//   - no allocation is lost: a pod that was seen holding devices (its DeviceAllocation said so,
//     which the agent writes only after the checkpoint is durable) keeps the same devices while
//     it is active, across every kill;
//   - no pod is shown holding devices the checkpoint does not hold: the DeviceAllocations with
//     devices are exactly the checkpoint's allocations, and every allocated pod is active;
//   - the NodeDevice shows as held exactly the checkpoint's devices, by the same pods;
//   - every active pod is allocated when devices are free (nothing wedges).
//
// KUBEDEVICE_CRASH_RUNS (default 1) is the number of runs per point; `make test-crash` runs 100.
// KUBEDEVICE_CRASH_SEED fixes the randomness (the seed is logged). The per-point outcomes are
// logged at the end and written to $KUBEDEVICE_CRASH_REPORT when set.
package crash
