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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
)

// tableAccept asks the API server for its server-side printing of a list: the Table kubectl
// renders for `kubectl get`.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// kubectl's tabwriter settings (k8s.io/cli-runtime/pkg/printers.GetNewTabWriter).
const (
	tabMinWidth = 6
	tabWidth    = 4
	tabPadding  = 3
)

// TableQuery is one `kubectl get` the demo prints.
type TableQuery struct {
	// Command is the kubectl command line the table stands for, for example
	// "kubectl get pods -o wide".
	Command string
	// Path is the API path of the list, for example /api/v1/namespaces/default/pods.
	Path string
	// FieldSelector, when set, filters the list.
	FieldSelector string
	// Options say how to render the table.
	Options RenderOptions
	// Empty is what kubectl prints when there is nothing to list.
	Empty string
}

// RenderOptions are the kubectl output options the demo uses.
type RenderOptions struct {
	// Wide shows the columns of priority above 0, as `-o wide`.
	Wide bool
	// WithNamespace adds a NAMESPACE column first, as `-A`.
	WithNamespace bool
}

// GetTable lists path (filtered by fieldSelector when not empty) from the API server as a Table.
func GetTable(ctx context.Context, rc rest.Interface, path, fieldSelector string) (*metav1.Table, error) {
	req := rc.Get().AbsPath(path).SetHeader("Accept", tableAccept)
	if fieldSelector != "" {
		req = req.Param("fieldSelector", fieldSelector)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("listing %s as a table: %w", path, err)
	}
	table := &metav1.Table{}
	// utiljson keeps integral numbers int64, as kubectl's decoder does, so 1 prints as 1.
	if err := utiljson.Unmarshal(raw, table); err != nil {
		return nil, fmt.Errorf("decoding the table of %s: %w", path, err)
	}
	if table.Kind != "Table" {
		return nil, fmt.Errorf("decoding the table of %s: the API server answered with kind %q", path, table.Kind)
	}
	return table, nil
}

// RenderTable writes t as kubectl writes a server-side table: upper-case headers, the columns of
// priority 0 (all of them with Wide), aligned with kubectl's tabwriter settings. An empty table
// prints nothing.
func RenderTable(w io.Writer, t *metav1.Table, opts RenderOptions) error {
	if len(t.Rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, tabMinWidth, tabWidth, tabPadding, ' ', 0)
	var header []string
	if opts.WithNamespace {
		header = append(header, "NAMESPACE")
	}
	for _, c := range t.ColumnDefinitions {
		if visible(c, opts) {
			header = append(header, strings.ToUpper(c.Name))
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range t.Rows {
		var cells []string
		if opts.WithNamespace {
			cells = append(cells, rowNamespace(row))
		}
		for i, c := range t.ColumnDefinitions {
			if !visible(c, opts) {
				continue
			}
			var cell any
			if i < len(row.Cells) {
				cell = row.Cells[i]
			}
			cells = append(cells, CellString(cell))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

func visible(c metav1.TableColumnDefinition, opts RenderOptions) bool {
	return opts.Wide || c.Priority == 0
}

// CellString formats a table cell as kubectl does: nothing for a missing value, the text up to
// the first line break (followed by "...") for a string, the value otherwise.
func CellString(cell any) string {
	if cell == nil {
		return ""
	}
	s, ok := cell.(string)
	if !ok {
		return fmt.Sprint(cell)
	}
	if i := strings.IndexAny(s, "\f\n\r"); i >= 0 {
		return s[:i] + "..."
	}
	return s
}

// rowNamespace returns the namespace of the row's object, which the server includes as
// PartialObjectMetadata (includeObject=Metadata, the default).
func rowNamespace(row metav1.TableRow) string {
	if len(row.Object.Raw) == 0 {
		return ""
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(row.Object.Raw, &obj); err != nil {
		return ""
	}
	return obj.Namespace
}

// Rows returns the table's rows as maps from upper-case column name (all columns, whatever their
// priority) to the cell as printed.
func Rows(t *metav1.Table) []map[string]string {
	rows := make([]map[string]string, 0, len(t.Rows))
	for _, row := range t.Rows {
		m := make(map[string]string, len(t.ColumnDefinitions))
		for i, c := range t.ColumnDefinitions {
			var cell any
			if i < len(row.Cells) {
				cell = row.Cells[i]
			}
			m[strings.ToUpper(c.Name)] = CellString(cell)
		}
		rows = append(rows, m)
	}
	return rows
}
