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

package plugincheck

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes the report for a terminal: a line per check with its evidence and the rule
// of each check that did not pass, a section per resource when the plugin registered several,
// then a summary that says how many resources were seen.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kubedevice plugin test: %s", r.Plugin)
	if len(r.Resources) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.Resources, ", "))
	}
	b.WriteString("\n")
	resources, sections := r.Sections()
	for i, results := range sections {
		b.WriteString("\n")
		if len(sections) > 1 {
			fmt.Fprintf(&b, "== %s ==\n", cmp.Or(resources[i], "(no resource)"))
		}
		for _, res := range results {
			fmt.Fprintf(&b, "%-5s %s\n", res.Outcome, res.Check.ID)
			for _, e := range res.Evidence {
				fmt.Fprintf(&b, "      %s\n", e)
			}
			if res.Outcome == Fail || res.Outcome == Warn {
				fmt.Fprintf(&b, "      rule: %s\n", res.Check.Rule)
			}
		}
	}
	fmt.Fprintf(&b, "\n%s; %d passed, %d failed, %d warned, %d skipped in %s", r.describeResources(),
		r.Count(Pass), r.Count(Fail), r.Count(Warn), r.Count(Skip), seconds(r.Duration))
	if r.Strict && r.Count(Warn) > 0 {
		b.WriteString(" (--strict: warnings fail)")
	}
	if r.Interrupted {
		b.WriteString("; INTERRUPTED: the run was stopped before it ended, so the checks it cut short are skipped")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// The JUnit XML schema that CI systems read (Jenkins, GitLab, GitHub actions' reporters).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML: a test suite per resource, a test case per check
// (classname kubedevice.plugin-test, followed by ".<resource>" when the plugin registered
// several); a failure (and, with Strict, a warning) is a <failure>, a skip a <skipped>; the
// evidence is in <system-out>.
func (r *Report) WriteJUnit(w io.Writer) error {
	doc := junitSuites{Name: "kubedevice plugin test", Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
	resources, sections := r.Sections()
	for i, results := range sections {
		suite := r.junitSuite(resources[i], results, len(sections) > 1)
		doc.Tests, doc.Failures, doc.Skipped = doc.Tests+suite.Tests, doc.Failures+suite.Failures, doc.Skipped+suite.Skipped
		doc.Suites = append(doc.Suites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("writing the JUnit report: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// junitSuite is the test suite of one resource's results.
func (r *Report) junitSuite(resource string, results []Result, several bool) junitSuite {
	suite := junitSuite{Name: "kubedevice plugin test", Tests: len(results), Time: fmt.Sprintf("%.3f", r.span(results).Seconds()),
		Properties: []junitProperty{{Name: "plugin", Value: r.Plugin}, {Name: "resource", Value: resource}}}
	classname := "kubedevice.plugin-test"
	if resource != "" {
		suite.Name += ": " + resource
	}
	if several && resource != "" {
		classname += "." + resource
	}
	if r.Interrupted {
		suite.Properties = append(suite.Properties, junitProperty{Name: "interrupted", Value: "true"})
	}
	for _, res := range results {
		c := junitCase{Name: res.Check.ID, Classname: classname, Time: fmt.Sprintf("%.3f", res.Duration.Seconds())}
		evidence := strings.Join(res.Evidence, "\n")
		switch {
		case res.Outcome == Fail || (res.Outcome == Warn && r.Strict):
			suite.Failures++
			c.Failure = &junitMessage{Message: firstLine(res.Evidence), Type: string(res.Outcome), Text: evidence + "\n\nrule: " + res.Check.Rule}
		case res.Outcome == Skip:
			suite.Skipped++
			c.Skipped = &junitMessage{Message: firstLine(res.Evidence)}
		case res.Outcome == Warn:
			c.SystemOut = "WARNING: " + evidence + "\n\nrule: " + res.Check.Rule
		default:
			c.SystemOut = evidence
		}
		suite.Cases = append(suite.Cases, c)
	}
	return suite
}

// span is how long the checks of results took, from the first start to the last end (checks
// overlap: the stream checks are judged over the whole run); the run's duration when they carry
// no times (a report made by hand).
func (r *Report) span(results []Result) time.Duration {
	var first, last time.Time
	for _, res := range results {
		if res.ended.IsZero() {
			continue
		}
		if start := res.ended.Add(-res.Duration); first.IsZero() || start.Before(first) {
			first = start
		}
		if res.ended.After(last) {
			last = res.ended
		}
	}
	if first.IsZero() {
		return r.Duration
	}
	return last.Sub(first)
}

func firstLine(evidence []string) string {
	if len(evidence) == 0 {
		return ""
	}
	line, _, _ := strings.Cut(evidence[0], "\n")
	return line
}
