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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

// journalFixture is a journal written as the manager writes it: a snapshot,
// then batches; ends[i] is the file length after write i (0: the
// snapshot) and states[i] the state it holds then.
type journalFixture struct {
	path   string
	blob   []byte
	ends   []int
	states []State
}

func testEntry(uid, container, resource string, ids ...string) Entry {
	return Entry{
		PodUID: uid, PodNamespace: "ns", PodName: "pod-" + uid, ContainerName: container, ResourceName: resource,
		DeviceIDs: DevicesPerNUMA{0: ids}, AllocResp: []byte("resp-" + uid),
	}
}

// apply is the model of a batch: what Read must return after it.
func apply(s State, b Batch) State {
	pods := make(map[string][]Entry)
	for _, e := range s.Entries {
		pods[e.PodUID] = append(pods[e.PodUID], e)
	}
	for uid, entries := range b.Pods {
		if len(entries) == 0 {
			delete(pods, uid)
		} else {
			pods[uid] = entries
		}
	}
	reg := maps.Clone(s.RegisteredDevices)
	if reg == nil {
		reg = make(map[string][]string)
	}
	maps.Copy(reg, b.Registered)
	for _, r := range b.Unregistered {
		delete(reg, r)
	}
	var out State
	for _, uid := range slices.Sorted(maps.Keys(pods)) {
		out.Entries = append(out.Entries, pods[uid]...)
	}
	if len(reg) > 0 {
		out.RegisteredDevices = reg
	}
	return out
}

func writeJournalFixture(t *testing.T) journalFixture {
	t.Helper()
	j := newTestJournal(t, filepath.Join(t.TempDir(), DefaultFileName), bootA)
	snapshot := State{
		Entries:           []Entry{testEntry("a", "c", "example.com/gopher", "g0", "g1")},
		RegisteredDevices: map[string][]string{"example.com/gopher": {"g0", "g1", "g2", "g3"}, "example.com/empty": {}},
	}
	batches := []Batch{
		{Pods: map[string][]Entry{"b": {testEntry("b", "c", "example.com/gopher", "g2")}}},
		{Pods: map[string][]Entry{"a": nil}},
		{Registered: map[string][]string{"vendor.com/nic": {"n0", "n1"}}},
		{
			Pods: map[string][]Entry{
				"c": {testEntry("c", "c1", "example.com/gopher", "g0"), testEntry("c", "c2", "vendor.com/nic", "n1")},
				"b": nil,
			},
			Unregistered: []string{"example.com/empty"},
		},
	}
	if err := j.Compact(snapshot); err != nil {
		t.Fatalf("Compact() = %v", err)
	}
	f := journalFixture{path: j.Path(), states: []State{snapshot}}
	f.ends = append(f.ends, fileSize(t, j.Path()))
	for i, b := range batches {
		if err := j.Append(b, true); err != nil {
			t.Fatalf("Append(batch %d) = %v", i, err)
		}
		f.ends = append(f.ends, fileSize(t, j.Path()))
		f.states = append(f.states, apply(f.states[len(f.states)-1], b))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	f.blob = blob
	return f
}

func newTestJournal(t *testing.T, path, bootID string) *Journal {
	t.Helper()
	j, err := OpenJournal(path, Options{BootIDPath: writeBootIDFile(t, bootID), Clock: fakeClock()})
	if err != nil {
		t.Fatalf("OpenJournal() = %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func fileSize(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Size())
}

func TestJournalRoundTrip(t *testing.T) {
	f := writeJournalFixture(t)
	j := newTestJournal(t, f.path, bootA)
	cp, err := j.Read()
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	want := &Checkpoint{State: f.states[len(f.states)-1], BootID: bootA, WrittenAt: testNow, Format: JournalVersion}
	if diff := cmp.Diff(want, cp); diff != "" {
		t.Errorf("Read() mismatch (-want +got):\n%s", diff)
	}
	if !bytes.HasPrefix(f.blob, []byte(journalMagic)) {
		t.Errorf("file starts with %q, want the magic %q", f.blob[:8], journalMagic)
	}
	assertMode(t, f.path, 0o600)

	// The same state encodes to the same bytes.
	if a, b := encodeSnapshot(want.State, bootA, testNow), encodeSnapshot(want.State, bootA, testNow); !bytes.Equal(a, b) {
		t.Error("encodeSnapshot is not deterministic")
	}
}

// A process killed during an append leaves the file cut at any byte of the
// frame: every cut reads back as the state of the last whole frame, with
// the rest reported as a torn tail, saved, and never returned as state.
func TestJournalTornAtEveryByte(t *testing.T) {
	f := writeJournalFixture(t)
	dir := t.TempDir()
	for cut := f.ends[0]; cut <= len(f.blob); cut++ {
		whole := 0
		for i, end := range f.ends {
			if end <= cut {
				whole = i
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("cut-%d", cut), DefaultFileName)
		j := newTestJournal(t, path, bootA)
		if err := os.WriteFile(path, f.blob[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		cp, err := j.Read()
		if err != nil {
			t.Fatalf("cut at %d: Read() = %v, want the state of write %d", cut, err, whole)
		}
		if diff := cmp.Diff(f.states[whole], cp.State); diff != "" {
			t.Errorf("cut at %d: state mismatch (-want +got):\n%s", cut, diff)
		}
		if cut == f.ends[whole] {
			if cp.TornTail != nil {
				t.Errorf("cut at %d, a frame boundary: TornTail = %+v, want none", cut, cp.TornTail)
			}
			continue
		}
		want := &TornTail{Offset: int64(f.ends[whole]), Bytes: int64(cut - f.ends[whole])}
		if cp.TornTail == nil || cp.TornTail.Offset != want.Offset || cp.TornTail.Bytes != want.Bytes || cp.TornTail.SaveErr != nil {
			t.Fatalf("cut at %d: TornTail = %+v, want offset %d, %d bytes, saved", cut, cp.TornTail, want.Offset, want.Bytes)
		}
		if saved, err := os.ReadFile(cp.TornTail.SavedPath); err != nil || !bytes.Equal(saved, f.blob[:cut]) {
			t.Errorf("cut at %d: saved copy %q: %v (same bytes: %t)", cut, cp.TornTail.SavedPath, err, bytes.Equal(saved, f.blob[:cut]))
		}
		if !strings.HasPrefix(cp.TornTail.SavedPath, path+".torn-") {
			t.Errorf("cut at %d: saved copy at %q", cut, cp.TornTail.SavedPath)
		}
		// The next snapshot drops the torn frame.
		if err := j.Compact(cp.State); err != nil {
			t.Fatal(err)
		}
		again, err := j.Read()
		if err != nil || again.TornTail != nil {
			t.Fatalf("cut at %d: after Compact, Read() = %+v, %v; want no torn tail", cut, again, err)
		}
		_ = j.Close()
	}
}

// Damage that no interrupted write can cause is corruption: the file is
// quarantined and a *CorruptError returned.
func TestJournalCorrupt(t *testing.T) {
	f := writeJournalFixture(t)
	flip := func(at int) func([]byte) []byte {
		return func(b []byte) []byte { b[at] ^= 0x40; return b }
	}
	cases := map[string]struct {
		mangle func([]byte) []byte
		want   CorruptReason
	}{
		"snapshot byte flipped":     {mangle: flip(f.ends[0] - 3), want: ReasonChecksumMismatch},
		"snapshot cut short":        {mangle: func(b []byte) []byte { return b[:f.ends[0]-1] }, want: ReasonTruncated},
		"magic only":                {mangle: func(b []byte) []byte { return b[:len(journalMagic)] }, want: ReasonTruncated},
		"middle frame byte flipped": {mangle: flip(f.ends[1] + frameHeaderSize + 2), want: ReasonChecksumMismatch},
		"middle frame length grown": {mangle: flip(f.ends[2]), want: ReasonChecksumMismatch},
		"unknown version":           {mangle: func(b []byte) []byte { b[len(journalMagic)-1] = 9; return b }, want: ReasonUnknownVersion},
		"garbage":                   {mangle: func([]byte) []byte { return []byte("\x00garbage") }, want: ReasonNotJSON},
		"empty":                     {mangle: func([]byte) []byte { return nil }, want: ReasonEmpty},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), DefaultFileName)
			mangled := tc.mangle(slices.Clone(f.blob))
			if err := os.WriteFile(path, mangled, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := newTestJournal(t, path, bootA).Read()
			var cerr *CorruptError
			if !errors.As(err, &cerr) || cerr.Reason != tc.want {
				t.Fatalf("Read() = %v, want a *CorruptError with reason %s", err, tc.want)
			}
			if got, err := os.ReadFile(cerr.QuarantinedPath); err != nil || !bytes.Equal(got, mangled) {
				t.Errorf("quarantined copy %q: %v", cerr.QuarantinedPath, err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("corrupt file still at %s: %v", path, err)
			}
		})
	}
}

// The last frame failing its checksum with nothing after it is a write cut
// short whose blocks were allocated but not all written: a torn tail.
func TestJournalGarbageTail(t *testing.T) {
	f := writeJournalFixture(t)
	last := len(f.ends) - 2
	mangled := slices.Clone(f.blob)
	for i := f.ends[last] + frameHeaderSize; i < len(mangled); i++ {
		mangled[i] = 0
	}
	path := filepath.Join(t.TempDir(), DefaultFileName)
	if err := os.WriteFile(path, mangled, 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := newTestJournal(t, path, bootA).Read()
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	if diff := cmp.Diff(f.states[last], cp.State); diff != "" {
		t.Errorf("state mismatch (-want +got):\n%s", diff)
	}
	if cp.TornTail == nil || cp.TornTail.Offset != int64(f.ends[last]) {
		t.Errorf("TornTail = %+v, want at offset %d", cp.TornTail, f.ends[last])
	}
}

// A snapshot written while the process is killed leaves at most a
// temporary file, which the next process removes; the file is intact.
func TestJournalCompactInterrupted(t *testing.T) {
	f := writeJournalFixture(t)
	dir := filepath.Dir(f.path)
	partial := encodeSnapshot(State{}, bootB, testNow)
	for cut := range len(partial) {
		tmp := filepath.Join(dir, tempPrefix(DefaultFileName)+fmt.Sprint(cut))
		if err := os.WriteFile(tmp, partial[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j := newTestJournal(t, f.path, bootB)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("files left after OpenJournal: %d, want only the checkpoint", len(entries))
	}
	cp, err := j.Read()
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	if diff := cmp.Diff(f.states[len(f.states)-1], cp.State); diff != "" {
		t.Errorf("state mismatch (-want +got):\n%s", diff)
	}
	if !cp.Rebooted {
		t.Error("Rebooted = false, want true (written in boot A, read in boot B)")
	}
}

// An unsynced append is in the file at once (it survives the process being
// killed); Sync makes it durable.
func TestJournalUnsyncedAppend(t *testing.T) {
	f := writeJournalFixture(t)
	j := newTestJournal(t, f.path, bootA)
	if err := j.Sync(); !errors.Is(err, errNeedsSnapshot) {
		t.Errorf("Sync() before a snapshot = %v, want errNeedsSnapshot", err)
	}
	last := f.states[len(f.states)-1]
	if err := j.Compact(last); err != nil {
		t.Fatal(err)
	}
	b := Batch{Pods: map[string][]Entry{"c": nil}}
	if err := j.Append(b, false); err != nil {
		t.Fatalf("Append(unsynced) = %v", err)
	}
	cp, err := newTestJournal(t, f.path, bootA).Read()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(apply(last, b), cp.State); diff != "" {
		t.Errorf("after an unsynced append (-want +got):\n%s", diff)
	}
	if err := j.Sync(); err != nil {
		t.Errorf("Sync() = %v", err)
	}
}

func TestJournalAppendNeedsSnapshot(t *testing.T) {
	j := newTestJournal(t, filepath.Join(t.TempDir(), DefaultFileName), bootA)
	if !j.NeedsCompaction() {
		t.Error("NeedsCompaction() = false before any snapshot")
	}
	if err := j.Append(Batch{Pods: map[string][]Entry{"a": nil}}, true); !errors.Is(err, errNeedsSnapshot) {
		t.Errorf("Append() before Compact = %v, want errNeedsSnapshot", err)
	}
	if err := j.Compact(State{}); err != nil {
		t.Fatal(err)
	}
	if j.NeedsCompaction() {
		t.Error("NeedsCompaction() = true right after a snapshot")
	}
	// Appends beyond twice the snapshot and 1 MiB ask for compaction.
	big := Batch{Registered: map[string][]string{"example.com/gopher": {strings.Repeat("x", 64<<10)}}}
	for range 16 {
		if err := j.Append(big, true); err != nil {
			t.Fatal(err)
		}
	}
	if !j.NeedsCompaction() {
		t.Error("NeedsCompaction() = false after 1 MiB of appends on an empty snapshot")
	}
	if err := j.Append(Batch{Pods: map[string][]Entry{"a": {testEntry("b", "c", "r.com/x", "d")}}}, true); !errors.Is(err, errInvalidState) {
		t.Errorf("Append(entry of another pod) = %v, want errInvalidState", err)
	}
}

// A file of format version 1 (the Store's) is read by the Journal, so an
// upgraded agent reads what the previous one wrote.
func TestJournalReadsVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), DefaultFileName)
	s, err := New(path, Options{BootIDPath: writeBootIDFile(t, bootA), Clock: fakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(testState()); err != nil {
		t.Fatal(err)
	}
	cp, err := newTestJournal(t, path, bootA).Read()
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	want := &Checkpoint{State: testState(), BootID: bootA, WrittenAt: testNow, Format: Version}
	if diff := cmp.Diff(want, cp); diff != "" {
		t.Errorf("Read() mismatch (-want +got):\n%s", diff)
	}
}

func writeBootIDFile(t *testing.T, id string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func fakeClock() *testingclock.FakeClock { return testingclock.NewFakeClock(testNow) }
