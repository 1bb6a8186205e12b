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
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kubedevice/kubedevice/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kubedevice's version and the commit it was built from",
		Long: `Print the release this binary is (the Helm chart's appVersion it was built with), the git commit
(with -dirty when the working tree had changes), the Go version and the platform. A binary built
without the repository's linker flags (hack/version.sh) says "` + version.Devel + `" and the commit the Go
toolchain recorded, if any. The agent and the controller print the same with --version, log it at
start and export it as the gauge ` + version.BuildInfoMetric + `.`,
		Example: `  kubedevice version
  kubedevice version -o json
  kubectl -n kubedevice-system exec daemonset/kubedevice-agent -- kubedevice version   # the image's`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "kubedevice", info)
				return err
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return fmt.Errorf("--output %q: want json, or nothing for one line", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json; empty prints one line.")
	return cmd
}
