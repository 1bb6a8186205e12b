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
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-ldflags -X, see the package doc); empty in a build without the flags.
var (
	version string
	commit  string
)

const (
	// Devel is the version of a build that was given none and whose module has none: a build of
	// a working tree without the linker flags (the Go toolchain's own word for it).
	Devel = "(devel)"
	// Unknown is the commit of a build that was given none and has no VCS stamp.
	Unknown = "unknown"
)

// Info is what a binary says about its build.
type Info struct {
	// Version is the release (the chart's appVersion when built by the repository's scripts).
	Version string `json:"version"`
	// Commit is the git commit, with "-dirty" when the working tree had changes.
	Commit string `json:"commit"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// AddFlag registers --version on fs, bound to show: the binary prints its version and exits.
func AddFlag(fs *flag.FlagSet, show *bool) {
	fs.BoolVar(show, "version", false, "Print the version (the release and the git commit it was built from) and exit.")
}

// String is one line: "0.2.0 (commit 1a2b3c4d5e6f, go1.26.8, linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

// resolve fills in what the linker did not set from the build information the toolchain
// recorded (nil when there is none).
func resolve(v, c string, bi *debug.BuildInfo) Info {
	info := Info{Version: v, Commit: c, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info.Version == "" {
		info.Version = Devel
		if bi != nil && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
	}
	if info.Commit == "" {
		info.Commit = vcsCommit(bi)
	}
	return info
}

// vcsCommit is the revision the toolchain stamped (-buildvcs), with "-dirty" when the tree was
// modified, or Unknown.
func vcsCommit(bi *debug.BuildInfo) string {
	if bi == nil {
		return Unknown
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return Unknown
	}
	if len(revision) > shortCommit {
		revision = revision[:shortCommit]
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
}

// shortCommit is how many hex digits of a commit the version shows (as hack/version.sh does).
const shortCommit = 12
