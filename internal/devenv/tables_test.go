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

package devenv

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// podsTable is the server-side table of two pods, as the API server sends it (IP, NODE, ... are
// of priority 1, shown only by -o wide).
func podsTable() *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Ready", Type: "string"},
		{Name: "Status", Type: "string"},
		{Name: "Restarts", Type: "string"},
		{Name: "Age", Type: "string"},
		{Name: "IP", Type: "string", Priority: 1},
		{Name: "Node", Type: "string", Priority: 1},
		{Name: "Nominated Node", Type: "string", Priority: 1},
		{Name: "Readiness Gates", Type: "string", Priority: 1},
	}
	return &metav1.Table{
		TypeMeta:          metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
		ColumnDefinitions: cols,
		Rows: []metav1.TableRow{
			{Cells: []any{"gopher-pod", "0/1", "Pending", int64(0), "5s", "<none>", "demo-node", "<none>", "<none>"}},
			{Cells: []any{"gopher-pod2", "0/1", "Pending", int64(0), "4s", "<none>", "<none>", "<none>", "<none>"}},
		},
	}
}

func TestRenderTable(t *testing.T) {
	withObject := func(ns string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"x","namespace":"` + ns + `"}}`)}
	}
	allocations := &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"},
			{Name: "Pod", Type: "string"},
			{Name: "Resources", Type: "string"},
			{Name: "Allocated", Type: "string"},
		},
		Rows: []metav1.TableRow{
			{Cells: []any{"gopher-pod-1da3f52233", "gopher-pod", "example.com/gopher=gopher-0", "True"}, Object: withObject("default")},
			// A missing value (nil) prints as nothing; a cell with a line break is cut there.
			{Cells: []any{"other-7", "other", nil, "False\nsecond line"}, Object: withObject("team-a")},
		},
	}
	tests := map[string]struct {
		table *metav1.Table
		opts  RenderOptions
		want  string
	}{
		"priority 0 columns only": {
			table: podsTable(),
			want: "" +
				"NAME          READY   STATUS    RESTARTS   AGE\n" +
				"gopher-pod    0/1     Pending   0          5s\n" +
				"gopher-pod2   0/1     Pending   0          4s\n",
		},
		"wide": {
			table: podsTable(),
			opts:  RenderOptions{Wide: true},
			want: "" +
				"NAME          READY   STATUS    RESTARTS   AGE   IP       NODE        NOMINATED NODE   READINESS GATES\n" +
				"gopher-pod    0/1     Pending   0          5s    <none>   demo-node   <none>           <none>\n" +
				"gopher-pod2   0/1     Pending   0          4s    <none>   <none>      <none>           <none>\n",
		},
		"with namespace": {
			table: allocations,
			opts:  RenderOptions{WithNamespace: true},
			want: "" +
				"NAMESPACE   NAME                    POD          RESOURCES                     ALLOCATED\n" +
				"default     gopher-pod-1da3f52233   gopher-pod   example.com/gopher=gopher-0   True\n" +
				"team-a      other-7                 other                                      False...\n",
		},
		"no rows prints nothing": {
			table: &metav1.Table{ColumnDefinitions: podsTable().ColumnDefinitions},
			want:  "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := RenderTable(&buf, tc.table, tc.opts); err != nil {
				t.Fatalf("RenderTable: %v", err)
			}
			if diff := cmp.Diff(tc.want, buf.String()); diff != "" {
				t.Errorf("RenderTable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCellString(t *testing.T) {
	tests := map[string]struct {
		cell any
		want string
	}{
		"nil":             {cell: nil, want: ""},
		"string":          {cell: "Registered", want: "Registered"},
		"int64":           {cell: int64(128), want: "128"},
		"bool":            {cell: true, want: "true"},
		"newline cut":     {cell: "first\nsecond", want: "first..."},
		"carriage return": {cell: "first\rsecond", want: "first..."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CellString(tc.cell); got != tc.want {
				t.Errorf("CellString(%#v) = %q, want %q", tc.cell, got, tc.want)
			}
		})
	}
}

func TestRows(t *testing.T) {
	got := Rows(podsTable())
	want := []map[string]string{
		{"NAME": "gopher-pod", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0", "AGE": "5s", "IP": "<none>",
			"NODE": "demo-node", "NOMINATED NODE": "<none>", "READINESS GATES": "<none>"},
		{"NAME": "gopher-pod2", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0", "AGE": "4s", "IP": "<none>",
			"NODE": "<none>", "NOMINATED NODE": "<none>", "READINESS GATES": "<none>"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}
}

func TestGetTable(t *testing.T) {
	var gotAccept, gotPath, gotSelector string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAccept, gotPath, gotSelector = r.Header.Get("Accept"), r.URL.Path, r.URL.Query().Get("fieldSelector")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},
			"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"","priority":0},
			                     {"name":"Capacity","type":"integer","format":"","description":"","priority":0}],
			"rows":[{"cells":["nd-1",1],"object":null}]}`)
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatalf("creating a clientset: %v", err)
	}
	table, err := GetTable(t.Context(), cs.CoreV1().RESTClient(), "/apis/kubedevice.io/v1alpha1/nodedevices", "spec.nodeName=n1")
	if err != nil {
		t.Fatalf("GetTable: %v", err)
	}
	if gotAccept != tableAccept || gotPath != "/apis/kubedevice.io/v1alpha1/nodedevices" || gotSelector != "spec.nodeName=n1" {
		t.Errorf("request: Accept %q, path %q, fieldSelector %q; want %q, the list's path and the selector", gotAccept, gotPath, gotSelector, tableAccept)
	}
	// An integer cell decodes as int64, as kubectl's decoder makes it, so it prints as 1.
	if diff := cmp.Diff([]any{"nd-1", int64(1)}, table.Rows[0].Cells); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
}

func TestGetTableRefusesAnotherKind(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatalf("creating a clientset: %v", err)
	}
	if _, err := GetTable(t.Context(), cs.CoreV1().RESTClient(), "/api/v1/pods", ""); err == nil {
		t.Error("GetTable accepted a PodList as a Table")
	}
}
