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

package status

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// Options select what Run shows.
type Options struct {
	// Node, when set, limits the summary to that node.
	Node string
}

// Run reads the NodeDevices and DeviceAllocations (of opts.Node, or all) and writes their summary
// to w.
func Run(ctx context.Context, c client.Reader, w io.Writer, opts Options) error {
	var selector []client.ListOption
	if opts.Node != "" {
		selector = append(selector, client.MatchingFields{"spec.nodeName": opts.Node})
	}
	var nds kdv1alpha1.NodeDeviceList
	if err := c.List(ctx, &nds, selector...); err != nil {
		return fmt.Errorf("listing NodeDevices: %w", err)
	}
	var das kdv1alpha1.DeviceAllocationList
	if err := c.List(ctx, &das, selector...); err != nil {
		return fmt.Errorf("listing DeviceAllocations: %w", err)
	}
	nodes := Summarize(nds.Items, das.Items)
	if len(nodes) == 0 {
		where := ""
		if opts.Node != "" {
			where = " on node " + opts.Node
		}
		_, err := fmt.Fprintf(w, "No NodeDevices or DeviceAllocations found%s.\n", where)
		return err
	}
	return Render(w, nodes)
}

// Render writes the node summaries: per node, its resources' counts, its devices and who holds
// them, the pods waiting for devices, and any disagreement between the objects.
func Render(w io.Writer, nodes []Node) error {
	// kubectl's table layout (minimum width 6, padding 3).
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	for i, n := range nodes {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		agent := n.Agent
		if n.AgentReason != "" {
			agent += " (" + n.AgentReason + ")"
		}
		fmt.Fprintf(tw, "Node %s\tagent %s\n", n.Name, agent)
		// A tabwriter aligns runs of lines with the same number of cells; the blank lines
		// between the sections keep each section's columns its own.
		if len(n.Resources) > 0 {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "  RESOURCE\tTOTAL\tALLOCATABLE\tALLOCATED\tUNHEALTHY\tCORDONED\tPLUGIN")
			for _, r := range n.Resources {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Name, r.Total, r.Allocatable, r.Allocated, r.Unhealthy, r.Cordoned, r.Plugin)
			}
		}
		if len(n.Devices) > 0 {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "  RESOURCE\tDEVICE\tHEALTH\tNUMA\tHELD BY (NAMESPACE/POD/CONTAINER)")
			for _, d := range n.Devices {
				holder := d.Holder
				if holder == "" {
					holder = "-"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", d.Resource, d.ID, healthString(d), numaString(d.NUMANodes), holder)
			}
		}
		if len(n.Waiting) > 0 {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "  WAITING FOR DEVICES\tREASON\tMESSAGE")
			for _, p := range n.Waiting {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", p.Pod, orDash(p.Reason), oneLine(orDash(p.Message)))
			}
		}
		if len(n.Disagreements) > 0 {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "  The NodeDevices and DeviceAllocations disagree (a NodeDevice may lag by a second; if this lasts, it is a bug):")
			for _, d := range n.Disagreements {
				fmt.Fprintf(tw, "  - %s\n", d)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	return nil
}

// healthString is the device's health, with the reason when unhealthy and a cordon mark.
func healthString(d Device) string {
	if d.Unlisted {
		return "not reported by its plugin"
	}
	s := d.Health
	if d.Health != string(kdv1alpha1.DeviceHealthy) && d.Reason != "" {
		s += " (" + d.Reason + ")"
	}
	if d.Cordoned {
		s += ", cordoned"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine cuts s at its first line break, as kubectl does in a table cell.
func oneLine(s string) string {
	if i := strings.IndexAny(s, "\f\n\r"); i >= 0 {
		return s[:i] + "..."
	}
	return s
}
