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

// Package contract holds the names and small rules every kubedevice binary shares: the namespace
// the install uses, the field owners each binary writes under, the agents' Lease names, the
// controller's leader election Lease and finalizer, and the condition and cache helpers both the
// agent and the controller use. The agent (cmd/kubedevice-agent, internal/agent), the controller
// (cmd/kubedevice-controller, internal/controller) and the CLI (cmd/kubedevice, internal/cleanup)
// import it, so that none of them imports another to learn a name.
//
// It imports only the Kubernetes API types, and nothing of kubedevice but its API: a name defined
// here is the one definition, and packages that expose it to their callers do so as an alias.
package contract
