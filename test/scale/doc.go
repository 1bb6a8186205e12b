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

// Package scale benchmarks the cluster controller against a real kube-apiserver and etcd
// (envtest, the binaries of bin/k8s) at the node counts of the performance targets: cold start,
// failover, steady state and churn, counting every API write the controller makes; and the node
// agent with a plugin of 10 000 devices (register, restart) or 100 000 (rejected), counting its
// writes. Run it with `make bench-scale`; it is not part of `make test`. See docs/performance.md,
// "Scale".
package scale
