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
	"bytes"
	"strings"
	"testing"
)

func helpOf(t *testing.T, arg0 string, args ...string) string {
	t.Helper()
	root := newRootCommand()
	asKubectlPlugin(root, arg0)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append(args, "--help"))
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestHelpAsKubectlPlugin(t *testing.T) {
	help := helpOf(t, "/usr/local/bin/kubectl-kubedevice", "drain")
	for _, want := range []string{
		"kubectl kubedevice drain NODE RESOURCE DEVICE... [flags]",
		"  kubectl kubedevice drain node-1 example.com/gopher gopher-0\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help of kubectl-kubedevice drain lacks %q:\n%s", want, help)
		}
	}
	if root := helpOf(t, "kubectl-kubedevice"); !strings.Contains(root, "kubectl kubedevice [command]") {
		t.Errorf("help of kubectl-kubedevice lacks the kubectl usage:\n%s", root)
	}
}

func TestHelpAsKubedevice(t *testing.T) {
	help := helpOf(t, "bin/kubedevice", "status")
	if !strings.Contains(help, "  kubedevice status [flags]") || strings.Contains(help, "kubectl kubedevice") {
		t.Errorf("help of kubedevice status:\n%s", help)
	}
}
