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

package gopher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

func TestScan(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"gopher-10":      "",
		"gopher-2":       "unhealthy",
		"gopher-1":       "  unhealthy \n",
		"gopher-3":       "unhealthy but happy",
		"gopher-4":       "UNHEALTHY",
		".gopher-5.swp":  "",
		"gopher,6":       "",
		"gopher-7\tbad":  "",
		"not-a-dir-gone": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "gopher-8"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gopher-2"), filepath.Join(dir, "gopher-9")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "gopher-11")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "not-a-dir-gone")); err != nil {
		t.Fatal(err)
	}

	logger, _ := ktesting.NewTestContext(t)
	devs, err := scan(logger, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gopher-1=Unhealthy", "gopher-2=Unhealthy", "gopher-3=Healthy", "gopher-4=Healthy",
		"gopher-9=Unhealthy", "gopher-10=Healthy",
	}
	if diff := cmp.Diff(want, describe(devs)); diff != "" {
		t.Errorf("scan (-want +got):\n%s", diff)
	}

	devs, err = scan(logger, filepath.Join(dir, "missing"))
	if err != nil || len(devs) != 0 {
		t.Errorf("scan of a missing directory = %v, %v; want no gophers and no error", devs, err)
	}
}
