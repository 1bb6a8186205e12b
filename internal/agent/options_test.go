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

package agent

import (
	"errors"
	"testing"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

func TestParseRuntimeInjection(t *testing.T) {
	for _, s := range []string{"nri", "none"} {
		if got, err := ParseRuntimeInjection(s); err != nil || string(got) != s {
			t.Errorf("%q: got %q, %v", s, got, err)
		}
	}
	if _, err := ParseRuntimeInjection("cri"); err == nil {
		t.Error("an unknown value was accepted")
	}
}

func TestValidate(t *testing.T) {
	cfg := nodeagent.Config{PluginDir: "/var/lib/kubedevice/device-plugins", PluginsRegistryDir: "/var/lib/kubelet/plugins_registry"}
	opts := func(socket string) Options {
		o := Options{NodeName: "n1"}
		o.PodResources.SocketPath = socket
		return o
	}
	for socket, ok := range map[string]bool{
		"": true,
		"/var/lib/kubedevice/pod-resources/kubelet.sock":               true,
		"relative/kubelet.sock":                                        false,
		"/var/lib/kubedevice/device-plugins/pr.sock":                   false,
		"/var/lib/kubedevice/device-plugins/../device-plugins/pr.sock": false,
		"/var/lib/kubelet/plugins_registry/pr.sock":                    false,
	} {
		if err := opts(socket).Validate(cfg); (err == nil) != ok {
			t.Errorf("socket %q: err %v, want ok %v", socket, err, ok)
		}
	}
	if err := (Options{}).Validate(cfg); !errors.Is(err, ErrNoNodeName) {
		t.Errorf("no node name: err %v", err)
	}
	for dir, ok := range map[string]bool{
		"":                                    true,
		"/var/lib/kubedevice/state":           true,
		"state":                               false,
		"/var/lib/kubedevice/device-plugins":  false,
		"/var/lib/kubedevice/device-plugins/": false,
	} {
		c := cfg
		c.StateDir = dir
		if err := opts("").Validate(c); (err == nil) != ok {
			t.Errorf("state dir %q: err %v, want ok %v", dir, err, ok)
		}
	}
}
