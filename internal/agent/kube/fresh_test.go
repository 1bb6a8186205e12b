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

package kube

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// readRecorder is a client.Reader that records the Gets it is asked, and answers NotFound: the
// tests below are about whether Fresh asks at all.
type readRecorder struct{ gets int }

func (r *readRecorder) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	r.gets++
	return apierrors.NewNotFound(schema.GroupResource{Group: kdv1alpha1.GroupVersion.Group, Resource: "nodedevices"}, key.Name)
}

func (r *readRecorder) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("Fresh never lists")
}

// TestFreshReadsOnlyWhatTheCacheMayNotShow: an object the cache does not show up to date is read
// from the API server only when the agent wrote it lately (the cache may not have seen that write
// yet), or when Fresh is given no memory of writes.
func TestFreshReadsOnlyWhatTheCacheMayNotShow(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	written := NewWritten(clk)
	key := client.ObjectKey{Name: "node.gopher-0"}
	upToDate := func(*kdv1alpha1.NodeDevice) bool { return true }
	fresh := func(w *Written, cached *kdv1alpha1.NodeDevice) (*kdv1alpha1.NodeDevice, bool, int) {
		t.Helper()
		r := &readRecorder{}
		got, ok, err := Fresh(ctx, r, w, "NodeDevice", key, cached, upToDate)
		if err != nil {
			t.Fatal(err)
		}
		return got, ok, r.gets
	}

	if got, ok, gets := fresh(written, nil); got != nil || ok || gets != 0 {
		t.Errorf("never written, not cached: got %v, up to date %v, %d reads; want nil, false, no read", got, ok, gets)
	}
	if _, _, gets := fresh(nil, nil); gets != 1 {
		t.Errorf("without a memory of writes: %d reads, want 1", gets)
	}
	cached := &kdv1alpha1.NodeDevice{}
	if got, ok, gets := fresh(written, cached); got != cached || !ok || gets != 0 {
		t.Errorf("cached and up to date: got %v, up to date %v, %d reads; want the cached object, true, no read", got, ok, gets)
	}
	stale := &kdv1alpha1.NodeDevice{}
	r := &readRecorder{}
	got, ok, err := Fresh(ctx, r, written, "NodeDevice", key, stale, func(*kdv1alpha1.NodeDevice) bool { return false })
	if err != nil || got != stale || ok || r.gets != 0 {
		t.Errorf("cached, not up to date, never written: got %v, up to date %v, err %v, %d reads; want the cached object, false, no read", got, ok, err, r.gets)
	}

	written.Wrote(key)
	clk.Step(WrittenMemory - time.Second)
	if got, ok, gets := fresh(written, nil); got != nil || ok || gets != 1 {
		t.Errorf("written lately, not cached: got %v, up to date %v, %d reads; want nil, false after one read", got, ok, gets)
	}
	if _, _, gets := fresh(written, &kdv1alpha1.NodeDevice{}); gets != 0 {
		t.Errorf("written lately, cached up to date: %d reads, want none", gets)
	}
	clk.Step(time.Second)
	if _, _, gets := fresh(written, nil); gets != 0 {
		t.Errorf("written %s ago: %d reads, want none", WrittenMemory, gets)
	}

	// Writes of other objects sweep the forgotten ones out.
	written.Wrote(client.ObjectKey{Name: "node.gopher-1"})
	if n := len(written.at); n != 1 {
		t.Errorf("Written holds %d objects after a sweep, want 1", n)
	}
}
