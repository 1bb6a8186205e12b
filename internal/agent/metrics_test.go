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
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestExportRuntimeInjection checks kubedevice_agent_runtime_injection has one series, the mode
// the agent last started with.
func TestExportRuntimeInjection(t *testing.T) {
	for _, mode := range []RuntimeInjection{RuntimeInjectionNRI, RuntimeInjectionNone} {
		exportRuntimeInjection(mode)
		want := `
# HELP kubedevice_agent_runtime_injection 1 for the managing agent's --runtime-injection mode (nri, none); absent in observe mode.
# TYPE kubedevice_agent_runtime_injection gauge
kubedevice_agent_runtime_injection{mode="` + string(mode) + `"} 1
`
		if err := testutil.CollectAndCompare(runtimeInjectionMode, strings.NewReader(want)); err != nil {
			t.Errorf("after %s: %v", mode, err)
		}
	}
}
