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

package registration

import (
	"context"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// A plugin's stream ending (the plugin returned, restarted or stopped) is logged at info level,
// with the plugin's resource and socket, never as an agent error (which the agent's logger prints
// with a stack trace).
func TestStreamEndIsInfo(t *testing.T) {
	for name, err := range map[string]error{
		"plugin returned": io.EOF,
		"plugin stopped":  status.Error(codes.Unavailable, "error reading from server: EOF"),
		"plugin error":    status.Error(codes.Internal, "the plugin failed"),
	} {
		t.Run(name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			c := newClient(klog.NewContext(context.Background(), logger), 1, testResource, "/run/dp/p.sock")
			defer c.close()
			c.logStreamEnd(err)
			entries := logger.GetSink().(ktesting.Underlier).GetBuffer().Data()
			if len(entries) != 1 {
				t.Fatalf("%d log entries, want 1: %+v", len(entries), entries)
			}
			e := entries[0]
			if e.Type != ktesting.LogInfo || e.Verbosity != 0 {
				t.Errorf("logged as %s at V(%d), want INFO at V(0): %+v", e.Type, e.Verbosity, e)
			}
			for _, kv := range [][]any{{"resourceName", testResource}, {"socketPath", "/run/dp/p.sock"}} {
				if !slices.ContainsFunc(slices.Collect(pairs(e.WithKVList)), func(p [2]any) bool { return p[0] == kv[0] && p[1] == kv[1] }) {
					t.Errorf("log entry lacks %v=%v: %+v", kv[0], kv[1], e.WithKVList)
				}
			}
			if !slices.Contains(e.ParameterKVList, any(err)) {
				t.Errorf("log entry lacks the stream's error %v: %+v", err, e.ParameterKVList)
			}
		})
	}
}

// pairs yields the key/value pairs of a logr key/value list.
func pairs(kvs []any) func(yield func([2]any) bool) {
	return func(yield func([2]any) bool) {
		for i := 0; i+1 < len(kvs); i += 2 {
			if !yield([2]any{kvs[i], kvs[i+1]}) {
				return
			}
		}
	}
}
