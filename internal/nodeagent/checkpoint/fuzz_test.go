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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The fuzz targets run their seeds in `make test` and explore with `make fuzz`. Each decoder must
// never panic, must classify every failure (a *decodeError, which Read turns into a CorruptError),
// and what it decodes must re-encode to itself.

// seedJournal is a version 2 file: a snapshot and two batches.
func seedJournal() []byte {
	at := time.Unix(1_790_000_000, 0)
	blob := encodeSnapshot(testState(), "boot-1", at)
	blob = append(blob, encodeBatch(Batch{
		Pods:       map[string][]Entry{"uid-3": {testEntry("uid-3", "c", "example.com/gopher", "gopher-2")}},
		Registered: map[string][]string{"vendor.com/fpga": {"fpga-0"}},
	}, at.Add(time.Second))...)
	blob = append(blob, encodeBatch(Batch{
		Pods:         map[string][]Entry{"uid-1": nil},
		Unregistered: []string{"vendor.com/nic"},
	}, at.Add(2*time.Second))...)
	return blob
}

var equateState = cmp.Options{cmpopts.EquateEmpty()}

func FuzzDecodeJournal(f *testing.F) {
	blob := seedJournal()
	f.Add(blob)
	f.Add(blob[:len(blob)-3])         // torn last batch
	f.Add(blob[:len(journalMagic)+5]) // torn snapshot header
	f.Add(encodeSnapshot(State{}, "", time.Time{}))
	damaged := bytes.Clone(blob)
	damaged[len(journalMagic)+frameHeaderSize+3] ^= 0xff // the snapshot's payload
	f.Add(damaged)
	f.Fuzz(func(t *testing.T, blob []byte) {
		if !bytes.HasPrefix(blob, []byte(journalMagic)) {
			blob = append([]byte(journalMagic), blob...)
		}
		jd, err := decodeJournal(blob)
		if err != nil {
			var de *decodeError
			if !errors.As(err, &de) {
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		if jd.tornAt >= int64(len(blob)) || (jd.tornAt >= 0 && jd.tornAt < int64(len(journalMagic))) {
			t.Fatalf("torn tail at %d of a %d-byte file", jd.tornAt, len(blob))
		}
		again, err := decodeJournal(encodeSnapshot(jd.state, jd.bootID, jd.writtenAt))
		if err != nil {
			t.Fatalf("a decoded state does not decode after re-encoding: %v", err)
		}
		if again.tornAt != -1 {
			t.Fatalf("a re-encoded snapshot reads as torn at %d", again.tornAt)
		}
		if diff := cmp.Diff(jd.state, again.state, equateState); diff != "" {
			t.Fatalf("state changed by re-encoding (-decoded +again):\n%s", diff)
		}
		if jd.bootID != again.bootID || !jd.writtenAt.Equal(again.writtenAt) {
			t.Fatalf("provenance changed by re-encoding: %q %v, then %q %v", jd.bootID, jd.writtenAt, again.bootID, again.writtenAt)
		}
	})
}

// frame wraps payload in a frame with its length and checksum, so the fuzzer reaches the decoding
// of values instead of stopping at checksums it cannot forge.
func frame(payload []byte) []byte {
	e := &encoder{}
	start := e.beginFrame()
	e.b = append(e.b, payload...)
	e.endFrame(start)
	return e.b
}

// payloads splits a file made by seedJournal into its frames' payloads.
func payloads(blob []byte) [][]byte {
	var out [][]byte
	for off := len(journalMagic); off < len(blob); {
		p, next, damage := nextFrame(blob, off)
		if damage != nil {
			break
		}
		out = append(out, p)
		off = next
	}
	return out
}

// FuzzDecodeJournalPayloads frames arbitrary snapshot and batch payloads with valid checksums:
// the values inside a checksummed frame are as untrusted as the frame (a writer's bug, or a
// forged file) and must be refused, never trusted or panicked on.
func FuzzDecodeJournalPayloads(f *testing.F) {
	p := payloads(seedJournal())
	f.Add(p[0], p[1])
	f.Add(p[0], p[2])
	f.Add(p[0][:len(p[0])/2], p[1])
	f.Add(p[0], []byte{kindBatch, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, snapshot, batch []byte) {
		blob := append([]byte(journalMagic), frame(snapshot)...)
		if len(batch) > 0 {
			blob = append(blob, frame(batch)...)
		}
		jd, err := decodeJournal(blob)
		if err != nil {
			var de *decodeError
			if !errors.As(err, &de) {
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		if jd.tornAt != -1 {
			t.Fatalf("intact frames read as torn at %d", jd.tornAt)
		}
		again, err := decodeJournal(encodeSnapshot(jd.state, jd.bootID, jd.writtenAt))
		if err != nil {
			t.Fatalf("a decoded state does not decode after re-encoding: %v", err)
		}
		if diff := cmp.Diff(jd.state, again.state, equateState); diff != "" {
			t.Fatalf("state changed by re-encoding (-decoded +again):\n%s", diff)
		}
	})
}

func FuzzDecodeV1(f *testing.F) {
	v1, err := encodeV1(testState(), "boot-1", time.Unix(1_790_000_000, 0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v1)
	f.Add(v1[:len(v1)/2])
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":7,"data":{}}`))
	f.Add([]byte(" \n"))
	f.Fuzz(func(t *testing.T, blob []byte) {
		d, err := decode(blob)
		if err != nil {
			var de *decodeError
			if !errors.As(err, &de) {
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		re, err := encodeV1(d.state, d.bootID, d.writtenAt)
		if err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		again, err := decode(re)
		if err != nil {
			t.Fatalf("a decoded state does not decode after re-encoding: %v", err)
		}
		if diff := cmp.Diff(d.state, again.state, equateState); diff != "" {
			t.Fatalf("state changed by re-encoding (-decoded +again):\n%s", diff)
		}
	})
}

func FuzzUnmarshalKubelet(f *testing.F) {
	k, err := MarshalKubelet(testState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(k)
	f.Add(k[:len(k)-10])
	f.Add([]byte(`{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}`))
	f.Fuzz(func(t *testing.T, blob []byte) {
		state, err := UnmarshalKubelet(blob)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		re, err := MarshalKubelet(state)
		if err != nil {
			t.Fatalf("a decoded kubelet checkpoint does not encode: %v", err)
		}
		again, err := UnmarshalKubelet(re)
		if err != nil {
			t.Fatalf("a decoded kubelet checkpoint does not decode after re-encoding: %v", err)
		}
		if diff := cmp.Diff(state, again, equateState); diff != "" {
			t.Fatalf("state changed by re-encoding (-decoded +again):\n%s", diff)
		}
	})
}
