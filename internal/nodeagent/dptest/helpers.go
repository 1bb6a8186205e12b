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

package dptest

import (
	"os"
	stdtesting "testing"
	"time"
)

// Eventually polls cond every few milliseconds until it returns nil, and
// fails tb with cond's last error if that takes longer than timeout.
func Eventually(tb stdtesting.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ShortTempDir returns a new directory with a short path, removed at the end
// of the test: unix socket paths are limited to 108 bytes, which
// testing.T.TempDir can exceed.
func ShortTempDir(tb stdtesting.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "kd")
	if err != nil {
		tb.Fatalf("creating temporary directory: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
