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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

const (
	bootA = "0b5a7e3c-1d2e-4f60-8a9b-0c1d2e3f4a5b"
	bootB = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
)

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// testEnv is a state directory with a boot ID file and a fake clock.
type testEnv struct {
	dir, path, bootIDPath string
	clock                 *testingclock.FakeClock
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	dir := t.TempDir()
	env := &testEnv{
		dir:        dir,
		path:       filepath.Join(dir, "state", DefaultFileName),
		bootIDPath: filepath.Join(dir, "boot_id"),
		clock:      testingclock.NewFakeClock(testNow),
	}
	env.setBootID(t, bootA)
	return env
}

// setBootID writes the boot ID file as the kernel does (with a newline).
func (e *testEnv) setBootID(t testing.TB, id string) {
	t.Helper()
	if err := os.WriteFile(e.bootIDPath, []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) store(t testing.TB) *Store {
	t.Helper()
	s, err := New(e.path, Options{BootIDPath: e.bootIDPath, Clock: e.clock})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return s
}

func testState() State {
	return State{
		Entries: []Entry{
			{
				PodUID: "uid-1", PodNamespace: "default", PodName: "trainer", ContainerName: "main",
				ResourceName: "example.com/gopher",
				DeviceIDs:    DevicesPerNUMA{0: {"gopher-0", "gopher-1"}, 1: {"gopher-1"}},
				AllocResp:    []byte("\x0a\x0c\x0a\x07GOPHERS\x12\x01x"),
			},
			{
				PodUID: "uid-2", PodNamespace: "other", PodName: "nic-user", ContainerName: "c",
				ResourceName: "vendor.com/nic",
				DeviceIDs:    DevicesPerNUMA{NoTopology: {"nic-0"}},
			},
		},
		RegisteredDevices: map[string][]string{
			"example.com/gopher": {"gopher-0", "gopher-1", "gopher-2"},
			"vendor.com/nic":     {"nic-0"},
		},
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("mode of %s = %v, want %v", path, got, want)
	}
}

// tempFiles lists the temporary files of path's writer.
func tempFiles(t *testing.T, path string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(path), tempPrefix(filepath.Base(path))+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

func TestRoundTrip(t *testing.T) {
	cases := map[string]State{
		"allocations":  testState(),
		"empty":        {},
		"empty values": {Entries: []Entry{}, RegisteredDevices: map[string][]string{"r": {}}},
		"no response":  {Entries: []Entry{{PodUID: "u", ContainerName: "c", ResourceName: "r"}}},
	}
	for name, state := range cases {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.store(t)
			if err := s.Write(state); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			got, err := s.Read()
			if err != nil {
				t.Fatalf("Read() = %v", err)
			}
			want := &Checkpoint{State: state, BootID: bootA, WrittenAt: testNow, Rebooted: false, Format: Version}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Read() mismatch (-want +got):\n%s", diff)
			}
			assertMode(t, env.path, 0o600)
			if tmp := tempFiles(t, env.path); len(tmp) != 0 {
				t.Errorf("temporary files left after Write: %v", tmp)
			}
		})
	}
}

func TestWriteReplacesAndStampsTime(t *testing.T) {
	env := newTestEnv(t)
	s := env.store(t)
	if err := s.Write(testState()); err != nil {
		t.Fatal(err)
	}
	env.clock.Step(90 * time.Second)
	second := State{RegisteredDevices: map[string][]string{"example.com/gopher": {"gopher-9"}}}
	if err := s.Write(second); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read()
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	want := &Checkpoint{State: second, BootID: bootA, WrittenAt: testNow.Add(90 * time.Second), Format: Version}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read() mismatch (-want +got):\n%s", diff)
	}
}

func TestReadDetectsReboot(t *testing.T) {
	env := newTestEnv(t)
	if err := env.store(t).Write(testState()); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		bootID       string
		wantRebooted bool
	}{
		"agent restart": {bootID: bootA, wantRebooted: false},
		"node reboot":   {bootID: bootB, wantRebooted: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env.setBootID(t, tc.bootID)
			s := env.store(t)
			got, err := s.Read()
			if err != nil {
				t.Fatalf("Read() = %v", err)
			}
			want := &Checkpoint{State: testState(), BootID: bootA, WrittenAt: testNow, Rebooted: tc.wantRebooted, Format: Version}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Read() mismatch (-want +got):\n%s", diff)
			}
			if s.BootID() != tc.bootID {
				t.Errorf("BootID() = %q, want %q", s.BootID(), tc.bootID)
			}
		})
	}
}

func TestReadNotFound(t *testing.T) {
	env := newTestEnv(t)
	_, err := env.store(t).Read()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read() = %v, want ErrNotFound", err)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Errorf("Read() = %v, a missing file is not corrupt", err)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	emptyBoot := filepath.Join(dir, "empty_boot_id")
	if err := os.WriteFile(emptyBoot, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		path string
		opts Options
	}{
		"empty path":        {path: "", opts: Options{BootIDPath: emptyBoot}},
		"missing boot ID":   {path: filepath.Join(dir, "cp"), opts: Options{BootIDPath: filepath.Join(dir, "nope")}},
		"empty boot ID":     {path: filepath.Join(dir, "cp"), opts: Options{BootIDPath: emptyBoot}},
		"directory is file": {path: filepath.Join(emptyBoot, "cp"), opts: Options{BootIDPath: emptyBoot}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.path, tc.opts); err == nil {
				t.Errorf("New(%q, %+v) = nil error, want an error", tc.path, tc.opts)
			}
		})
	}
}

// validFile returns the bytes of a correct checkpoint of testState.
func validFile(t *testing.T) []byte {
	t.Helper()
	blob, err := encodeV1(testState(), bootA, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

func TestReadQuarantinesCorruptFiles(t *testing.T) {
	valid := validFile(t)
	invalidEntry, err := encodeV1(State{Entries: []Entry{{ContainerName: "c", ResourceName: "r"}}}, bootA, testNow)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) []byte {
		if !bytes.Contains(valid, []byte(old)) {
			t.Fatalf("valid file does not contain %q", old)
		}
		return bytes.Replace(valid, []byte(old), []byte(new), 1)
	}
	cases := map[string]struct {
		content    []byte
		wantReason CorruptReason
	}{
		"bad checksum, data changed":   {content: replace(`"gopher-1"]`, `"gopher-7"]`), wantReason: ReasonChecksumMismatch},
		"bad checksum, boot ID forged": {content: replace(bootA, bootB), wantReason: ReasonChecksumMismatch},
		"bad checksum, digest changed": {content: replace(`"checksum":"sha256:`, `"checksum":"sha256:00`), wantReason: ReasonChecksumMismatch},
		"bad checksum, other algo":     {content: replace(`"checksum":"sha256:`, `"checksum":"fnv32a:`), wantReason: ReasonChecksumMismatch},
		"truncated half":               {content: valid[:len(valid)/2], wantReason: ReasonTruncated},
		"truncated last byte":          {content: valid[:len(valid)-1], wantReason: ReasonTruncated},
		"truncated to one byte":        {content: valid[:1], wantReason: ReasonTruncated},
		"empty":                        {content: []byte{}, wantReason: ReasonEmpty},
		"white space":                  {content: []byte(" \n\t\n"), wantReason: ReasonEmpty},
		"zero bytes (preallocated)":    {content: make([]byte, 4096), wantReason: ReasonNotJSON},
		"not JSON":                     {content: []byte("kubedevice was here\n"), wantReason: ReasonNotJSON},
		"trailing garbage":             {content: append(append([]byte{}, valid...), []byte("}garbage")...), wantReason: ReasonNotJSON},
		"unknown version":              {content: replace(`{"version":1,`, `{"version":2,`), wantReason: ReasonUnknownVersion},
		"version zero":                 {content: replace(`{"version":1,`, `{"version":0,`), wantReason: ReasonUnknownVersion},
		"newer version, other shape": {
			content:    []byte(`{"version":7,"sha512":"abc","payload":{"allocations":[]}}`),
			wantReason: ReasonUnknownVersion,
		},
		"version of wrong type":        {content: replace(`{"version":1,`, `{"version":"1",`), wantReason: ReasonUnknownFormat},
		"kubelet checkpoint":           {content: readGolden(t), wantReason: ReasonUnknownFormat},
		"JSON array":                   {content: []byte(`[{"version":1}]`), wantReason: ReasonUnknownFormat},
		"JSON null":                    {content: []byte(`null`), wantReason: ReasonUnknownFormat},
		"unknown envelope field":       {content: replace(`{"version":1,`, `{"version":1,"extra":true,`), wantReason: ReasonUnknownFormat},
		"data not an object":           {content: []byte(`{"version":1,"checksum":"sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b","data":null}`), wantReason: ReasonUnknownFormat},
		"checksummed but invalid data": {content: invalidEntry, wantReason: ReasonInvalidData},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.store(t)
			if err := os.WriteFile(env.path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}

			got, err := s.Read()
			if got != nil {
				t.Errorf("Read() returned state %+v for a corrupt file", got)
			}
			wantQuarantine := env.path + ".corrupt-20260102T030405.000000006Z"
			assertCorrupt(t, err, CorruptError{Path: env.path, QuarantinedPath: wantQuarantine, Reason: tc.wantReason})
			assertQuarantined(t, env.path, wantQuarantine, tc.content)

			// The agent can carry on: nothing is left to read, and the next
			// write starts a fresh file.
			if _, err := s.Read(); !errors.Is(err, ErrNotFound) {
				t.Errorf("Read() after quarantine = %v, want ErrNotFound", err)
			}
			if err := s.Write(testState()); err != nil {
				t.Errorf("Write() after quarantine = %v", err)
			}
		})
	}
}

func TestReadQuarantinesUnreadable(t *testing.T) {
	env := newTestEnv(t)
	s := env.store(t)
	// A directory where the file should be: reading it fails with EISDIR.
	if err := os.MkdirAll(filepath.Join(env.path, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read()
	wantQuarantine := env.path + ".corrupt-20260102T030405.000000006Z"
	assertCorrupt(t, err, CorruptError{Path: env.path, QuarantinedPath: wantQuarantine, Reason: ReasonUnreadable})
	if _, err := os.Stat(filepath.Join(wantQuarantine, "sub")); err != nil {
		t.Errorf("quarantined directory: %v", err)
	}
}

func TestQuarantineNamesDoNotCollide(t *testing.T) {
	env := newTestEnv(t)
	s := env.store(t)
	base := env.path + ".corrupt-20260102T030405.000000006Z"
	for i, want := range []string{base, base + "-2", base + "-3"} {
		content := []byte(fmt.Sprintf("garbage %d", i))
		if err := os.WriteFile(env.path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Read() // the fake clock does not move
		assertCorrupt(t, err, CorruptError{Path: env.path, QuarantinedPath: want, Reason: ReasonNotJSON})
		assertQuarantined(t, env.path, want, content)
	}
}

func assertCorrupt(t *testing.T, err error, want CorruptError) {
	t.Helper()
	var cerr *CorruptError
	if !errors.As(err, &cerr) {
		t.Fatalf("Read() = %v, want a *CorruptError", err)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("errors.Is(%v, ErrCorrupt) = false", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) = true", err)
	}
	if cerr.Err == nil {
		t.Errorf("CorruptError.Err is nil")
	}
	ignoreErr := cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())
	if diff := cmp.Diff(want, *cerr, ignoreErr); diff != "" {
		t.Errorf("CorruptError mismatch (-want +got):\n%s\nerror: %v", diff, err)
	}
	if !strings.Contains(err.Error(), want.Path) || !strings.Contains(err.Error(), string(want.Reason)) {
		t.Errorf("error message %q does not name the file and reason", err)
	}
}

// assertQuarantined checks that path is gone and quarantined holds content.
func assertQuarantined(t *testing.T, path, quarantined string, content []byte) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("original path %s still exists (err=%v)", path, err)
	}
	got, err := os.ReadFile(quarantined)
	if err != nil {
		t.Fatalf("reading quarantined file: %v", err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("quarantined file holds %q, want the original %q", got, content)
	}
}

func TestWriteRefusesInvalidState(t *testing.T) {
	cases := map[string]State{
		"empty pod UID":        {Entries: []Entry{{ContainerName: "c", ResourceName: "r"}}},
		"empty container":      {Entries: []Entry{{PodUID: "u", ResourceName: "r"}}},
		"empty resource":       {Entries: []Entry{{PodUID: "u", ContainerName: "c"}}},
		"NUMA node below -1":   {Entries: []Entry{{PodUID: "u", ContainerName: "c", ResourceName: "r", DeviceIDs: DevicesPerNUMA{-2: {"d"}}}}},
		"empty device ID":      {Entries: []Entry{{PodUID: "u", ContainerName: "c", ResourceName: "r", DeviceIDs: DevicesPerNUMA{0: {""}}}}},
		"empty resource key":   {RegisteredDevices: map[string][]string{"": {"d"}}},
		"empty registered dev": {RegisteredDevices: map[string][]string{"r": {""}}},
	}
	for name, state := range cases {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.store(t)
			if err := s.Write(testState()); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(env.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(state); !errors.Is(err, errInvalidState) {
				t.Errorf("Write(%+v) = %v, want an invalid state error", state, err)
			}
			if err := WriteKubeletFile(filepath.Join(env.dir, KubeletFileName), state); !errors.Is(err, errInvalidState) {
				t.Errorf("WriteKubeletFile(%+v) = %v, want an invalid state error", state, err)
			}
			after, err := os.ReadFile(env.path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("refused Write changed the file")
			}
		})
	}
}

// TestInterruptedWrite covers a crash in the middle of Write: the temporary
// file it leaves never affects Read, and the next process removes it.
func TestInterruptedWrite(t *testing.T) {
	valid := validFile(t)
	cases := map[string]struct {
		previous []byte // nil: no checkpoint had been written yet
	}{
		"over an existing checkpoint": {previous: valid},
		"first write":                 {previous: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.store(t)
			if tc.previous != nil {
				if err := os.WriteFile(env.path, tc.previous, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// What a crash between CreateTemp and Rename leaves behind:
			// a partially written new checkpoint under a temporary name.
			stale := filepath.Join(filepath.Dir(env.path), tempPrefix(DefaultFileName)+"123456")
			if err := os.WriteFile(stale, valid[:len(valid)/3], 0o600); err != nil {
				t.Fatal(err)
			}

			got, err := s.Read()
			if tc.previous == nil {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Read() = %v, want ErrNotFound", err)
				}
			} else {
				if err != nil {
					t.Fatalf("Read() = %v", err)
				}
				if diff := cmp.Diff(testState(), got.State); diff != "" {
					t.Errorf("Read() mismatch (-want +got):\n%s", diff)
				}
			}
			if _, err := os.Stat(stale); err != nil {
				t.Errorf("Read() touched the temporary file: %v", err)
			}

			// A restarted agent removes the leftover before writing.
			s2 := env.store(t)
			if left := tempFiles(t, env.path); len(left) != 0 {
				t.Errorf("New() left temporary files: %v", left)
			}
			if err := s2.Write(testState()); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			if _, err := s2.Read(); err != nil {
				t.Errorf("Read() after write = %v", err)
			}
		})
	}
}

func TestNewKeepsUnrelatedFiles(t *testing.T) {
	env := newTestEnv(t)
	env.store(t)
	dir := filepath.Dir(env.path)
	keep := []string{"kubelet.sock", KubeletFileName, ".other.tmp-1", DefaultFileName + ".corrupt-20260102T030405.000000006Z"}
	for _, name := range keep {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env.store(t)
	for _, name := range keep {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("New() removed %s: %v", name, err)
		}
	}
}

func TestWriteFailureLeavesNoTempFile(t *testing.T) {
	env := newTestEnv(t)
	s := env.store(t)
	// A non-empty directory at the target makes the rename fail.
	if err := os.MkdirAll(filepath.Join(env.path, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(testState()); err == nil {
		t.Fatalf("Write() over a non-empty directory = nil, want an error")
	}
	if left := tempFiles(t, env.path); len(left) != 0 {
		t.Errorf("failed Write() left temporary files: %v", left)
	}
}

func TestConcurrentWritesAndReads(t *testing.T) {
	env := newTestEnv(t)
	s := env.store(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			st := testState()
			st.Entries[0].PodUID = fmt.Sprintf("uid-%d", i)
			errs <- s.Write(st)
		}()
		go func() {
			defer wg.Done()
			if _, err := s.Read(); err != nil && !errors.Is(err, ErrNotFound) {
				errs <- err
				return
			}
			errs <- nil
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Write/Read: %v", err)
		}
	}
	if _, err := s.Read(); err != nil {
		t.Errorf("final Read() = %v", err)
	}
}

func TestDevicesPerNUMADevices(t *testing.T) {
	d := DevicesPerNUMA{1: {"b", "a"}, 0: {"a"}, NoTopology: {"c"}}
	if diff := cmp.Diff([]string{"a", "b", "c"}, d.Devices()); diff != "" {
		t.Errorf("Devices() mismatch (-want +got):\n%s", diff)
	}
	if got := (DevicesPerNUMA{}).Devices(); got != nil {
		t.Errorf("Devices() of empty = %v, want nil", got)
	}
}

// benchState returns n allocation entries shaped like a real plugin's: two
// 40-character device IDs on a NUMA node and a response with an env var,
// two device nodes and a mount (about 300 bytes of JSON each).
func benchState(b testing.TB, n int) State {
	resp := marshalResponse(b, goldenResponses()[0])
	st := State{RegisteredDevices: map[string][]string{}}
	for i := range n {
		d0 := fmt.Sprintf("GPU-%08d-aaaa-bbbb-cccc-%012d", i, 2*i)
		d1 := fmt.Sprintf("GPU-%08d-aaaa-bbbb-cccc-%012d", i, 2*i+1)
		st.Entries = append(st.Entries, Entry{
			PodUID:        fmt.Sprintf("0b5a7e3c-1d2e-4f60-8a9b-%012d", i),
			PodNamespace:  "team-a",
			PodName:       fmt.Sprintf("trainer-%d", i),
			ContainerName: "main",
			ResourceName:  "example.com/gpu",
			DeviceIDs:     DevicesPerNUMA{int64(i % 8): {d0, d1}},
			AllocResp:     resp,
		})
		st.RegisteredDevices["example.com/gpu"] = append(st.RegisteredDevices["example.com/gpu"], d0, d1)
	}
	return st
}

// BenchmarkWrite measures a durable checkpoint write (encode, temporary
// file, fsync, rename, directory fsync) on the file system of the test's
// temporary directory.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			env := newTestEnv(b)
			s := env.store(b)
			st := benchState(b, n)
			blob, err := encodeV1(st, bootA, testNow)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(blob)))
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Write(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
