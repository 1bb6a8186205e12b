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

// Command krew renders the kubectl plugin's krew manifest (plugins/kubedevice.yaml, a Go template)
// for the archives `make krew` built: the version, and each archive's platform and sha256. It
// checks the result against krew's rules for a plugin manifest (validate.go) and writes it to
// standard output.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var opts options
	flag.StringVar(&opts.template, "template", "plugins/kubedevice.yaml", "The manifest template.")
	flag.StringVar(&opts.version, "version", "", "The release version (v is prepended when missing).")
	flag.StringVar(&opts.archives, "archives", "bin/krew", "The directory of the archives kubectl-kubedevice_<os>_<arch>.tar.gz.")
	flag.StringVar(&opts.uriBase, "uri-base", "https://github.com/kubedevice/kubedevice/releases/download/{version}",
		"Where the archives are downloaded from; {version} is replaced by the version.")
	flag.Parse()
	out, err := render(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "krew: %v\n", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintf(os.Stderr, "krew: %v\n", err)
		os.Exit(1)
	}
}
