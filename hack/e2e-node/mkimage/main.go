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

// Command mkimage writes an OCI image-layout tar for the real-node e2e cluster, without Docker or a
// registry: one gzip layer with busybox (and its applet links), /pause (the entrypoint, so the image is
// also the pod sandbox image), and the static binaries given on the command line in /usr/local/bin.
// containerd imports it with
//
//	ctr -n k8s.io images import --all-platforms <tar>
//
// under the name in the index annotation io.containerd.image.name.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var (
		spec Spec
		bins stringList
	)
	out := flag.String("o", "", "the OCI image-layout tar to write (required)")
	flag.StringVar(&spec.Name, "name", "docker.io/local/kubedevice:e2e", "the image name containerd imports it as")
	flag.StringVar(&spec.Busybox, "busybox", "/bin/busybox", "a static busybox, installed as /bin/busybox with its applet links")
	flag.StringVar(&spec.Pause, "pause", "", "a static binary that sleeps forever, installed as /pause (required)")
	flag.StringVar(&spec.Arch, "arch", "amd64", "the image's architecture")
	flag.Var(&bins, "bin", "a static binary to install in /usr/local/bin (repeatable)")
	flag.Parse()
	if *out == "" || spec.Pause == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	spec.Binaries = bins
	applets, err := BusyboxApplets(spec.Busybox)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	spec.Applets = applets
	digest, err := Write(*out, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", *out, spec.Name, digest)
}
