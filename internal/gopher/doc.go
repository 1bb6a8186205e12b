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

// Package gopher is the sample device plugin behind cmd/gopher-device-plugin,
// built on pkg/deviceplugin. It advertises one device per file in a
// directory (default /etc/gophers) as the extended resource
// example.com/gopher:
//
//   - The device ID is the file name. Names starting with "." (editor and
//     temporary files), directories, and names that cannot be device IDs
//     (holding a comma or a control character, or longer than 253 bytes) are
//     skipped.
//   - A file whose content, trimmed of white space, is "unhealthy" is an
//     unhealthy device; any other file is healthy. Writing the file flips the
//     health.
//   - The directory is watched with fsnotify: adding, removing, renaming or
//     writing a file updates the device list at once, and the directory is
//     also rescanned periodically, in case an event was lost.
//
// Allocate answers, for each container, the env GOPHER=<IDs, comma-separated
// in natural order> and a read-only mount of each gopher file at
// /gophers/<ID>. The mount's host path is the file's absolute path as the
// plugin sees it, so a plugin running in a pod must mount the host's gophers
// directory at the same path. GetPreferredAllocation prefers the lowest-numbered free
// gophers in natural order (gopher-2 before gopher-10), always including the
// ones that must be included. PreStartContainer (required) checks that the
// gophers exist. Allocate and PreStartContainer fail with NotFound for a
// gopher whose file is gone.
package gopher
