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
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// What libraries log through klog (the core's plugin watcher and garbage collector with a context
// that carries no logger, client-go) comes out in the agent's format, one JSON object a line, not
// klog's text format.
func TestSetLoggerRoutesKlog(t *testing.T) {
	var buf bytes.Buffer
	setLogger(&zap.Options{}, &buf)
	klog.InfoS("Logged through klog", "path", "/var/lib/kubedevice/device-plugins/gopher.sock")
	klog.Background().Info("Logged through klog's logger", "n", 1)
	klog.Flush()

	var msgs []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a line is not JSON: %q", sc.Text())
		}
		msg, _ := line["msg"].(string)
		msgs = append(msgs, msg)
	}
	if len(msgs) != 2 || msgs[0] != "Logged through klog" || msgs[1] != "Logged through klog's logger" {
		t.Errorf("logged %q, want both klog lines in the agent's format", msgs)
	}
}
