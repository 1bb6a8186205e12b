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

// Package version says which release of kubedevice a binary is, and from which commit.
//
// Every build path of the repository (the Makefile's build and image, hack/e2e-node/e2e.sh, the
// real-node suite's image) sets both with the linker flags hack/version.sh prints:
//
//	go build -ldflags "$(hack/version.sh)" ./cmd/kubedevice
//
// which is
//
//	-X github.com/kubedevice/kubedevice/internal/version.version=<the chart's appVersion>
//	-X github.com/kubedevice/kubedevice/internal/version.commit=<git commit>[-dirty]
//
// A build without them says what the Go toolchain recorded instead: the module version
// ("(devel)" for a build of a working tree, vX.Y.Z for `go install ...@vX.Y.Z`) and the VCS
// revision when it was stamped (the Makefile builds with -buildvcs=false), else "unknown".
// The commands print it (`kubedevice version`, `kubedevice-agent --version`, ...), log it at
// start, and the agent and the controller export it as the gauge kubedevice_build_info.
package version
