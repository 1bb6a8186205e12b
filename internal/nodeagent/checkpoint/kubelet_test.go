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

package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const goldenPath = "testdata/" + KubeletFileName

// goldenChecksum is the checksum the kubelet v1.37.1 wrote into the golden file.
const goldenChecksum = 3303563842

// goldenResponses are the allocation responses of goldenState, in entry order.
func goldenResponses() []*pluginapi.ContainerAllocateResponse {
	return []*pluginapi.ContainerAllocateResponse{
		{
			Envs:   map[string]string{"GOPHERS": "gopher-0,gopher-1", "A_FIRST": "1"},
			Mounts: []*pluginapi.Mount{{ContainerPath: "/gopher", HostPath: "/var/lib/gopher", ReadOnly: true}},
			Devices: []*pluginapi.DeviceSpec{
				{ContainerPath: "/dev/gopher0", HostPath: "/dev/gopher0", Permissions: "rw"},
				{ContainerPath: "/dev/gopher1", HostPath: "/dev/gopher1", Permissions: "rwm"},
			},
		},
		{Envs: map[string]string{"GOPHERS": "gopher-2"}},
		{
			Annotations: map[string]string{"vendor.com/nic": "nic-0,nic-2,nic-10"},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/nic=nic-0"}},
		},
		{},
	}
}

func marshalResponse(t testing.TB, r *pluginapi.ContainerAllocateResponse) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		t.Fatalf("marshalling allocation response: %v", err)
	}
	return b
}

// goldenState is the data the kubelet was given to write testdata/kubelet_internal_checkpoint
// (see testdata/README.md). It covers several NUMA nodes per entry, the
// no-topology key -1, keys that sort differently as strings and numbers
// (2, 10), a device on two NUMA nodes, an empty allocation response, an
// empty registered device list, and strings that JSON escapes.
func goldenState(t testing.TB) State {
	resp := goldenResponses()
	return State{
		Entries: []Entry{
			{
				PodUID: "6b1b0d6e-0f5c-4b8e-9a3e-2f4c1d7e8a01", ContainerName: "init", ResourceName: "example.com/gopher",
				DeviceIDs: DevicesPerNUMA{0: {"gopher-0", "gopher-1"}},
				AllocResp: marshalResponse(t, resp[0]),
			},
			{
				PodUID: "6b1b0d6e-0f5c-4b8e-9a3e-2f4c1d7e8a01", ContainerName: "app", ResourceName: "example.com/gopher",
				DeviceIDs: DevicesPerNUMA{0: {"gopher-2"}, 1: {"gopher-2"}},
				AllocResp: marshalResponse(t, resp[1]),
			},
			{
				PodUID: "c0ffee00-1111-2222-3333-444455556666", ContainerName: "nic-user", ResourceName: "vendor.com/nic",
				DeviceIDs: DevicesPerNUMA{-1: {"nic-0"}, 2: {"nic-2"}, 10: {"nic-10"}},
				AllocResp: marshalResponse(t, resp[2]),
			},
			{
				PodUID: "c0ffee00-1111-2222-3333-444455556666", ContainerName: "odd \"names\" <&> ü", ResourceName: "vendor.com/odd",
				DeviceIDs: DevicesPerNUMA{-1: {"id with spaces", "<tag>&amp;", "ünïcödé"}},
				AllocResp: marshalResponse(t, resp[3]),
			},
		},
		RegisteredDevices: map[string][]string{
			"example.com/gopher": {"gopher-0", "gopher-1", "gopher-2", "gopher-3"},
			"vendor.com/nic":     {"nic-0", "nic-2", "nic-10"},
			"vendor.com/odd":     {"id with spaces", "<tag>&amp;", "ünïcödé"},
			"example.com/empty":  {},
		},
	}
}

func readGolden(t *testing.T) []byte {
	t.Helper()
	blob, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("reading golden file: %v", err)
	}
	return blob
}

func TestReadKubeletGolden(t *testing.T) {
	got, err := ReadKubeletFile(goldenPath)
	if err != nil {
		t.Fatalf("ReadKubeletFile(%s) = %v, want the kubelet's checksum accepted", goldenPath, err)
	}
	if diff := cmp.Diff(goldenState(t), got); diff != "" {
		t.Errorf("ReadKubeletFile(%s) mismatch (-want +got):\n%s", goldenPath, diff)
	}
	// The allocation responses decode to the messages the kubelet was given,
	// independently of how protobuf laid out their bytes.
	for i, want := range goldenResponses() {
		var resp pluginapi.ContainerAllocateResponse
		if err := proto.Unmarshal(got.Entries[i].AllocResp, &resp); err != nil {
			t.Fatalf("entry %d: unmarshalling AllocResp: %v", i, err)
		}
		if !proto.Equal(want, &resp) {
			t.Errorf("entry %d: AllocResp = %v, want %v", i, &resp, want)
		}
	}
}

func TestMarshalKubeletMatchesKubelet(t *testing.T) {
	golden := readGolden(t)
	got, err := MarshalKubelet(goldenState(t))
	if err != nil {
		t.Fatalf("MarshalKubelet() = %v", err)
	}
	var file struct{ Checksum uint64 }
	if err := json.Unmarshal(got, &file); err != nil {
		t.Fatalf("decoding our output: %v", err)
	}
	if file.Checksum != goldenChecksum {
		t.Errorf("MarshalKubelet() checksum = %d, want the kubelet's %d", file.Checksum, uint64(goldenChecksum))
	}
	if !bytes.Equal(golden, got) {
		t.Errorf("MarshalKubelet() is not byte-identical to the kubelet's file:\n got: %s\nwant: %s", got, golden)
	}

	// And through the file writer.
	path := filepath.Join(t.TempDir(), KubeletFileName)
	if err := WriteKubeletFile(path, goldenState(t)); err != nil {
		t.Fatalf("WriteKubeletFile() = %v", err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(golden, written) {
		t.Errorf("WriteKubeletFile() content differs from the kubelet's file:\n got: %s\nwant: %s", written, golden)
	}
	assertMode(t, path, 0o600)
}

func TestReadKubeletTampered(t *testing.T) {
	golden := readGolden(t)
	cases := map[string]struct {
		old, new   string
		wantReason CorruptReason
	}{
		"device ID changed":       {old: `"gopher-1"]`, new: `"gopher-9"]`, wantReason: ReasonChecksumMismatch},
		"NUMA node changed":       {old: `"10":["nic-10"]`, new: `"11":["nic-10"]`, wantReason: ReasonChecksumMismatch},
		"allocation resp changed": {old: `"ChMKB0dPUEhFUlMSCGdvcGhlci0y"`, new: `"ChMKB0dPUEhFUlMSCGdvcGhlci0z"`, wantReason: ReasonChecksumMismatch},
		"registered device added": {old: `"example.com/empty":[]`, new: `"example.com/empty":["x"]`, wantReason: ReasonChecksumMismatch},
		"checksum changed":        {old: `"Checksum":3303563842`, new: `"Checksum":3303563843`, wantReason: ReasonChecksumMismatch},
		"truncated":               {old: `,"Checksum":3303563842}`, new: `,"Checksum":33`, wantReason: ReasonTruncated},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if !bytes.Contains(golden, []byte(tc.old)) {
				t.Fatalf("golden file does not contain %q", tc.old)
			}
			path := filepath.Join(t.TempDir(), KubeletFileName)
			tampered := bytes.Replace(golden, []byte(tc.old), []byte(tc.new), 1)
			if err := os.WriteFile(path, tampered, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadKubeletFile(path)
			var cerr *CorruptError
			if !errors.As(err, &cerr) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadKubeletFile() = %v, want a *CorruptError", err)
			}
			want := CorruptError{Path: path, Reason: tc.wantReason}
			if diff := cmp.Diff(want, *cerr, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())); diff != "" {
				t.Errorf("ReadKubeletFile() error mismatch (-want +got):\n%s", diff)
			}
			// The kubelet's file is never moved.
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, tampered) {
				t.Errorf("kubelet file changed or moved: err=%v", err)
			}
		})
	}
}

func TestReadKubeletNotFound(t *testing.T) {
	_, err := ReadKubeletFile(filepath.Join(t.TempDir(), KubeletFileName))
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadKubeletFile(missing) = %v, want ErrNotFound", err)
	}
}

func TestKubeletConversion(t *testing.T) {
	ours := State{
		Entries: []Entry{{
			PodUID: "uid-1", PodNamespace: "ns", PodName: "pod", ContainerName: "c", ResourceName: "example.com/gopher",
			DeviceIDs: DevicesPerNUMA{0: {"a"}}, AllocResp: []byte{1, 2},
		}},
		RegisteredDevices: map[string][]string{"example.com/gopher": {"a", "b"}},
	}
	blob, err := MarshalKubelet(ours)
	if err != nil {
		t.Fatalf("MarshalKubelet() = %v", err)
	}
	got, err := UnmarshalKubelet(blob)
	if err != nil {
		t.Fatalf("UnmarshalKubelet() = %v", err)
	}
	want := ours
	want.Entries = []Entry{ours.Entries[0]}
	want.Entries[0].PodNamespace, want.Entries[0].PodName = "", ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubelet round trip mismatch (-want +got):\n%s", diff)
	}

	// Empty state keeps the kubelet's nil-versus-empty distinctions, which
	// the checksum depends on.
	for name, s := range map[string]State{
		"nil":   {},
		"empty": {Entries: []Entry{}, RegisteredDevices: map[string][]string{}},
	} {
		blob, err := MarshalKubelet(s)
		if err != nil {
			t.Fatalf("%s: MarshalKubelet() = %v", name, err)
		}
		got, err := UnmarshalKubelet(blob)
		if err != nil {
			t.Fatalf("%s: UnmarshalKubelet(%s) = %v", name, blob, err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("%s: round trip mismatch (-want +got):\n%s", name, diff)
		}
	}
}

func TestUnmarshalKubeletRejectsGarbage(t *testing.T) {
	cases := map[string]struct {
		blob string
		want CorruptReason
	}{
		"empty":     {blob: "", want: ReasonEmpty},
		"not JSON":  {blob: "kubelet", want: ReasonNotJSON},
		"truncated": {blob: `{"Data":{"PodDeviceEntries":[`, want: ReasonTruncated},
		// encoding/json matches field names case-insensitively, so our
		// format's string "checksum" fails to decode into the kubelet's uint64.
		"our format": {blob: `{"version":1,"checksum":"sha256:00","data":{}}`, want: ReasonUnknownFormat},
		// The kubelet decodes leniently: another object decodes to zero data
		// with checksum 0, which does not match.
		"other object": {blob: `{"foo":1}`, want: ReasonChecksumMismatch},
		"array":        {blob: `[1,2]`, want: ReasonUnknownFormat},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := UnmarshalKubelet([]byte(tc.blob))
			var cerr *CorruptError
			if !errors.As(err, &cerr) {
				t.Fatalf("UnmarshalKubelet(%q) = %v, want a *CorruptError", tc.blob, err)
			}
			if cerr.Reason != tc.want {
				t.Errorf("UnmarshalKubelet(%q) reason = %s, want %s (%v)", tc.blob, cerr.Reason, tc.want, err)
			}
		})
	}
}
