//go:build crashpoint

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

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with the crashpoint tag.
const Enabled = true

var (
	armedName string
	armedAt   int64
	hits      atomic.Int64
)

func init() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	name, n, ok := strings.Cut(v, ":")
	at, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || at < 1 {
		fmt.Fprintf(os.Stderr, "crashpoint: %s=%q is not <name>:<n> with n >= 1\n", EnvVar, v)
		os.Exit(2)
	}
	armedName, armedAt = name, at
}

// Hit counts a pass of the point name and kills the process with SIGKILL at the armed pass.
func Hit(name string) {
	if name != armedName {
		return
	}
	if n := hits.Add(1); n == armedAt {
		fmt.Fprintf(os.Stderr, "crashpoint: %s hit %d, SIGKILL\n", name, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never return into the path.
	}
}
