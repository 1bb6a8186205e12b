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

// Command gopher-device-plugin is kubedevice's sample device plugin: every
// file in a directory is a device of the extended resource example.com/gopher.
// It works unchanged with the kubelet and with kubedevice. It only wires (the
// flags are gopher.Options.AddFlags'); the plugin is internal/gopher, built on
// pkg/deviceplugin.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/kubedevice/kubedevice/internal/gopher"
	"github.com/kubedevice/kubedevice/internal/version"
)

const usage = `Usage: gopher-device-plugin [flags]

Advertises one device of the extended resource --resource-name per file in
--gophers-dir; the device ID is the file name. A file whose content is
"unhealthy" is an unhealthy device. Files are watched: add, remove or write
one and the device manager sees the change at once.

A container that gets gophers sees GOPHER=<IDs, comma-separated> and each
gopher file mounted read-only at /gophers/<ID>. The mounts name the files by
the path the plugin sees: in a pod, mount the host's --gophers-dir at the
same path.

With the kubelet, the defaults work. With kubedevice, either run the plugin
with --plugin-dir=/var/lib/kubedevice/device-plugins, or mount that host
directory at /var/lib/kubelet/device-plugins in the plugin's pod.

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "gopher-device-plugin: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		opts        gopher.Options
		showVersion bool
		logConfig   = textlogger.NewConfig()
	)
	fs := flag.NewFlagSet("gopher-device-plugin", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	opts.AddFlags(fs)
	fs.BoolVar(&showVersion, "version", false, "Print the version (kubedevice's release and git commit) and exit.")
	logConfig.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if showVersion {
		_, err := fmt.Println("gopher-device-plugin", version.Get())
		return err
	}

	plugin, err := gopher.New(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, textlogger.NewLogger(logConfig))
	return plugin.Run(ctx)
}
