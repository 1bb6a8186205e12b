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

// Package nritest runs the runtime side of NRI for tests, as containerd does: the nri module's
// adaptation, with containerd's default validator enabled (so the required-plugins annotation is
// enforced), serving a socket that external plugins connect to, and asked to adjust containers
// as containerd asks when the kubelet creates them.
//
// It owns only that test runtime. It is for tests: no package of the agent but tests may import
// it, and it imports nothing of kubedevice.
package nritest
