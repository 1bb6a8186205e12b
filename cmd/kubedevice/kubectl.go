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

package main

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// kubectlPluginName is the name kubectl runs the tool by: `kubectl kubedevice status` runs
// kubectl-kubedevice status from the PATH. `make build` links bin/kubectl-kubedevice to kubedevice.
const kubectlPluginName = "kubectl-kubedevice"

// asKubectlPlugin makes the help of root and its commands say "kubectl kubedevice" when the tool
// was run as kubectl-kubedevice (arg0 is os.Args[0]); run as anything else, it changes nothing.
func asKubectlPlugin(root *cobra.Command, arg0 string) {
	if strings.TrimSuffix(filepath.Base(arg0), ".exe") != kubectlPluginName {
		return
	}
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl kubedevice"
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Example = strings.ReplaceAll(c.Example, "  kubedevice ", "  kubectl kubedevice ")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
