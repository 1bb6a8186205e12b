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
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/version"
)

// The test binary is built without the linker flags: it says what version.Get says.
func TestVersionCommand(t *testing.T) {
	info := version.Get()
	line := "kubedevice " + info.String() + "\n"
	tests := map[string]struct {
		args    []string
		want    string
		wantErr bool
	}{
		"version":    {args: []string{"version"}, want: line},
		"--version":  {args: []string{"--version"}, want: line},
		"-o json":    {args: []string{"version", "-o", "json"}},
		"-o unknown": {args: []string{"version", "-o", "yaml"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			root := newRootCommand()
			root.SetOut(&out)
			root.SetArgs(tc.args)
			err := root.Execute()
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("Execute() error = %v, want an error: %t", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if tc.want != "" {
				if diff := cmp.Diff(tc.want, out.String()); diff != "" {
					t.Errorf("output (-want +got):\n%s", diff)
				}
				return
			}
			var got version.Info
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("decoding %q: %v", out.String(), err)
			}
			if diff := cmp.Diff(info, got); diff != "" {
				t.Errorf("-o json (-want +got):\n%s", diff)
			}
		})
	}
}
