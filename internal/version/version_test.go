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

package version

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	stamped := &debug.BuildInfo{Main: debug.Module{Version: Devel}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}}
	tests := map[string]struct {
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		"set by the linker": {
			version: "0.2.0", commit: "1a2b3c4d5e6f", bi: stamped,
			want: Info{Version: "0.2.0", Commit: "1a2b3c4d5e6f"},
		},
		"a go build of a working tree, VCS stamped": {
			bi:   stamped,
			want: Info{Version: Devel, Commit: "0123456789ab-dirty"},
		},
		"a go build without VCS stamp (-buildvcs=false)": {
			bi:   &debug.BuildInfo{Main: debug.Module{Version: Devel}},
			want: Info{Version: Devel, Commit: Unknown},
		},
		"go install of a tagged module": {
			bi:   &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}},
			want: Info{Version: "v0.2.0", Commit: Unknown},
		},
		"no build information": {
			want: Info{Version: Devel, Commit: Unknown},
		},
		"the linker's version, the toolchain's commit": {
			version: "0.2.0", bi: stamped,
			want: Info{Version: "0.2.0", Commit: "0123456789ab-dirty"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.want.GoVersion, tc.want.Platform = runtime.Version(), platform
			if diff := cmp.Diff(tc.want, resolve(tc.version, tc.commit, tc.bi)); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "0.2.0", Commit: "1a2b3c4d5e6f", GoVersion: "go1.26.8", Platform: "linux/amd64"}.String()
	if want := "0.2.0 (commit 1a2b3c4d5e6f, go1.26.8, linux/amd64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestCollector(t *testing.T) {
	c := newCollector(Info{Version: "0.2.0", Commit: "1a2b3c4d5e6f", GoVersion: "go1.26.8"})
	want := `# HELP kubedevice_build_info The binary's build: version (the release), commit (git, with -dirty for a modified tree) and go_version; always 1.
# TYPE kubedevice_build_info gauge
kubedevice_build_info{commit="1a2b3c4d5e6f",go_version="go1.26.8",version="0.2.0"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), BuildInfoMetric); err != nil {
		t.Error(err)
	}
}

// TestLinkerFlags builds a binary with the flags hack/version.sh prints, as every build path of
// the repository does, and checks that they reach the variables: -X names them by their import
// path and silently sets nothing when they move or are renamed.
func TestLinkerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	script := filepath.Join("..", "..", "hack", "version.sh")
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), "VERSION=9.8.7", "GIT_COMMIT=feedc0ffee12-dirty")
	flags, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(flags)), "-o", bin, "./testdata/printversion")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", flags, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	var got Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	want := Info{Version: "9.8.7", Commit: "feedc0ffee12-dirty", GoVersion: got.GoVersion, Platform: got.Platform}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the built binary's version (-want +got):\n%s", diff)
	}
}
