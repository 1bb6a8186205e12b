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
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"time"
)

// Format version 2 on disk:
//
//	file    = magic frame{snapshot} frame{batch}*
//	magic   = "KDVCKPT" 0x02
//	frame   = len:uint32le crc:uint32le payload[len]     crc = CRC-32C of payload
//	snapshot= 0x01 writtenAt:varint(unix ns) bootID:str uvarint(n) entry*n uvarint(m) (resource:str ids)*m
//	batch   = 0x02 writtenAt:varint(unix ns) uvarint(p) (podUID:str uvarint(k) entry*k)*p
//	              uvarint(r) (resource:str ids)*r uvarint(u) resource:str*u
//	entry   = podUID:str namespace:str name:str container:str resource:str
//	          uvarint(g) (numaNode:varint ids)*g allocResp:bytes
//	ids     = uvarint(n) str*n
//	str, bytes = uvarint(len) raw
//
// A snapshot is the whole state; a batch gives the complete new entries of
// each pod it names (none: the pod holds nothing) and the complete device
// IDs of each resource it names. Integers are Go's varints. NUMA nodes are
// written in ascending order and entries in the order given, so equal state
// encodes to equal bytes.
const (
	journalMagic = "KDVCKPT\x02"

	frameHeaderSize = 8
	// maxFrameSize bounds a frame's declared length: a larger one is damage.
	maxFrameSize = 1 << 30

	kindSnapshot byte = 1
	kindBatch    byte = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encoder appends the binary encoding.
type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.b = append(e.b, b...) }

func (e *encoder) ids(ids []string) {
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		e.str(id)
	}
}

func (e *encoder) entry(en Entry) {
	e.str(en.PodUID)
	e.str(en.PodNamespace)
	e.str(en.PodName)
	e.str(en.ContainerName)
	e.str(en.ResourceName)
	e.uvarint(uint64(len(en.DeviceIDs)))
	for _, node := range slices.Sorted(maps.Keys(en.DeviceIDs)) {
		e.varint(node)
		e.ids(en.DeviceIDs[node])
	}
	e.bytes(en.AllocResp)
}

func (e *encoder) registered(reg map[string][]string) {
	e.uvarint(uint64(len(reg)))
	for _, r := range slices.Sorted(maps.Keys(reg)) {
		e.str(r)
		e.ids(reg[r])
	}
}

// beginFrame reserves the frame header; endFrame fills it in.
func (e *encoder) beginFrame() int {
	start := len(e.b)
	e.b = append(e.b, make([]byte, frameHeaderSize)...)
	return start
}

func (e *encoder) endFrame(start int) {
	payload := e.b[start+frameHeaderSize:]
	binary.LittleEndian.PutUint32(e.b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(e.b[start+4:], crc32.Checksum(payload, castagnoli))
}

// encodeSnapshot renders a whole version 2 file holding state.
func encodeSnapshot(state State, bootID string, writtenAt time.Time) []byte {
	e := &encoder{b: make([]byte, 0, 4096)}
	e.b = append(e.b, journalMagic...)
	start := e.beginFrame()
	e.b = append(e.b, kindSnapshot)
	e.varint(writtenAt.UnixNano())
	e.str(bootID)
	e.uvarint(uint64(len(state.Entries)))
	for _, en := range state.Entries {
		e.entry(en)
	}
	e.registered(state.RegisteredDevices)
	e.endFrame(start)
	return e.b
}

// encodeBatch renders one batch frame.
func encodeBatch(b Batch, writtenAt time.Time) []byte {
	e := &encoder{b: make([]byte, 0, 512)}
	start := e.beginFrame()
	e.b = append(e.b, kindBatch)
	e.varint(writtenAt.UnixNano())
	e.uvarint(uint64(len(b.Pods)))
	for _, uid := range slices.Sorted(maps.Keys(b.Pods)) {
		e.str(uid)
		e.uvarint(uint64(len(b.Pods[uid])))
		for _, en := range b.Pods[uid] {
			e.entry(en)
		}
	}
	e.registered(b.Registered)
	unreg := slices.Sorted(slices.Values(b.Unregistered))
	e.uvarint(uint64(len(unreg)))
	for _, r := range unreg {
		e.str(r)
	}
	e.endFrame(start)
	return e.b
}

// errShortPayload is a payload that ends inside a value.
var errShortPayload = errors.New("payload ends inside a value")

// decoder reads the binary encoding; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail(errShortPayload)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShortPayload)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShortPayload)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length and checks it against the bytes left, each counted
// item taking at least one byte, so damage cannot make it allocate wildly.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("count %d exceeds the %d bytes left", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) raw() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.raw()) }

func (d *decoder) ids() []string {
	n := d.count()
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.str())
	}
	return out
}

func (d *decoder) entry() Entry {
	e := Entry{
		PodUID:        d.str(),
		PodNamespace:  d.str(),
		PodName:       d.str(),
		ContainerName: d.str(),
		ResourceName:  d.str(),
	}
	groups := d.count()
	e.DeviceIDs = make(DevicesPerNUMA, groups)
	for range groups {
		node := d.varint()
		e.DeviceIDs[node] = d.ids()
	}
	if resp := d.raw(); len(resp) > 0 {
		e.AllocResp = slices.Clone(resp)
	}
	return e
}

func (d *decoder) registered(into map[string][]string) {
	for range d.count() {
		r := d.str()
		into[r] = d.ids()
	}
}

// journalDecoded is a decoded version 2 file.
type journalDecoded struct {
	state     State
	bootID    string
	writtenAt time.Time
	// tornAt is the offset of a partial last frame, or -1.
	tornAt int64
}

// frameDamage is why a frame cannot be used: it is shorter than its header
// says (short), or it fails its checksum.
type frameDamage struct {
	short bool
	msg   string
}

// nextFrame splits the frame at off of blob: its payload and the offset
// after it, or what is wrong with it.
func nextFrame(blob []byte, off int) (payload []byte, next int, damage *frameDamage) {
	if len(blob)-off < frameHeaderSize {
		return nil, 0, &frameDamage{short: true, msg: fmt.Sprintf("%d bytes left, shorter than a frame header", len(blob)-off)}
	}
	n := binary.LittleEndian.Uint32(blob[off:])
	sum := binary.LittleEndian.Uint32(blob[off+4:])
	if n > maxFrameSize || int64(len(blob)-off-frameHeaderSize) < int64(n) {
		return nil, 0, &frameDamage{short: true, msg: fmt.Sprintf("frame declares %d bytes, %d left", n, len(blob)-off-frameHeaderSize)}
	}
	payload = blob[off+frameHeaderSize : off+frameHeaderSize+int(n)]
	if got := crc32.Checksum(payload, castagnoli); got != sum {
		return nil, 0, &frameDamage{msg: fmt.Sprintf("frame checksum %08x, payload hashes to %08x", sum, got)}
	}
	return payload, off + frameHeaderSize + int(n), nil
}

// decodeJournal parses a version 2 file. Every failure is a *decodeError.
func decodeJournal(blob []byte) (*journalDecoded, error) {
	off := len(journalMagic)
	payload, next, damage := nextFrame(blob, off)
	if damage != nil {
		// The snapshot is written whole, then renamed into place: it is
		// never partial after a crash.
		reason := ReasonChecksumMismatch
		if damage.short {
			reason = ReasonTruncated
		}
		return nil, corrupt(reason, "snapshot at offset %d: %s", off, damage.msg)
	}
	out := &journalDecoded{tornAt: -1}
	pods := make(map[string][]Entry)
	registered := make(map[string][]string)
	d := &decoder{b: payload}
	if k := d.byte(); k != kindSnapshot {
		return nil, corrupt(ReasonUnknownFormat, "first frame is of kind %d, not a snapshot", k)
	}
	out.writtenAt = time.Unix(0, d.varint()).UTC()
	out.bootID = d.str()
	for range d.count() {
		e := d.entry()
		pods[e.PodUID] = append(pods[e.PodUID], e)
	}
	d.registered(registered)
	if err := frameEnd(d); err != nil {
		return nil, corrupt(ReasonUnknownFormat, "snapshot at offset %d: %w", off, err)
	}

	for off = next; off < len(blob); off = next {
		payload, next, damage = nextFrame(blob, off)
		if damage != nil {
			if at, found := intactFrameAfter(blob, off); found {
				return nil, corrupt(ReasonChecksumMismatch, "frame at offset %d: %s, with an intact frame at offset %d after it", off, damage.msg, at)
			}
			out.tornAt = int64(off)
			break
		}
		at, err := applyBatch(pods, registered, payload, off)
		if err != nil {
			return nil, err
		}
		out.writtenAt = at
	}

	for _, uid := range slices.Sorted(maps.Keys(pods)) {
		out.state.Entries = append(out.state.Entries, pods[uid]...)
	}
	if len(registered) > 0 {
		out.state.RegisteredDevices = registered
	}
	if err := out.state.validate(); err != nil {
		return nil, &decodeError{reason: ReasonInvalidData, err: err}
	}
	return out, nil
}

// applyBatch decodes the batch frame at offset off and applies it to the
// entries by pod UID and the registered devices; it returns when the frame
// was written.
func applyBatch(pods map[string][]Entry, registered map[string][]string, payload []byte, off int) (time.Time, error) {
	d := &decoder{b: payload}
	if k := d.byte(); k != kindBatch {
		return time.Time{}, corrupt(ReasonUnknownFormat, "frame at offset %d is of kind %d, not a batch", off, k)
	}
	at := time.Unix(0, d.varint()).UTC()
	b := Batch{Pods: make(map[string][]Entry), Registered: make(map[string][]string)}
	for range d.count() {
		uid := d.str()
		n := d.count()
		entries := make([]Entry, 0, n)
		for range n {
			entries = append(entries, d.entry())
		}
		b.Pods[uid] = entries
	}
	d.registered(b.Registered)
	for range d.count() {
		b.Unregistered = append(b.Unregistered, d.str())
	}
	if err := frameEnd(d); err != nil {
		return time.Time{}, corrupt(ReasonUnknownFormat, "frame at offset %d: %w", off, err)
	}
	// What the writer refuses to append (Append validates), the reader refuses to apply:
	// e.g. entries filed under another pod's UID would survive a compaction in another order.
	if err := b.validate(); err != nil {
		return time.Time{}, &decodeError{reason: ReasonInvalidData, err: fmt.Errorf("frame at offset %d: %w", off, err)}
	}
	for uid, entries := range b.Pods {
		if len(entries) == 0 {
			delete(pods, uid)
		} else {
			pods[uid] = entries
		}
	}
	maps.Copy(registered, b.Registered)
	for _, r := range b.Unregistered {
		delete(registered, r)
	}
	return at, nil
}

// frameEnd checks that a payload was decoded whole and without error.
func frameEnd(d *decoder) error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) > 0 {
		return fmt.Errorf("%d bytes after the last value", len(d.b))
	}
	return nil
}

// intactFrameAfter reports whether an intact frame starts anywhere
// after the damaged frame at off: then the damage is not a torn tail, since
// appends are sequential and a write is only issued after the previous one
// returned. It scans byte by byte, which only happens on a damaged file.
func intactFrameAfter(blob []byte, off int) (at int, found bool) {
	for i := off + 1; i+frameHeaderSize <= len(blob); i++ {
		n := binary.LittleEndian.Uint32(blob[i:])
		if n == 0 || n > maxFrameSize || int64(len(blob)-i-frameHeaderSize) < int64(n) {
			continue
		}
		payload := blob[i+frameHeaderSize : i+frameHeaderSize+int(n)]
		if payload[0] == kindBatch && crc32.Checksum(payload, castagnoli) == binary.LittleEndian.Uint32(blob[i+4:]) {
			return i, true
		}
	}
	return 0, false
}
