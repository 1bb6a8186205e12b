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
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report for a terminal: a line per check with its evidence and the rule
// of each check that did not pass, then a summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kubedevice plugin test: %s", r.Plugin)
	if r.Resource != "" {
		fmt.Fprintf(&b, " (%s)", r.Resource)
	}
	b.WriteString("\n\n")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%-5s %s\n", res.Outcome, res.Check.ID)
		for _, e := range res.Evidence {
			fmt.Fprintf(&b, "      %s\n", e)
		}
		if res.Outcome == Fail || res.Outcome == Warn {
			fmt.Fprintf(&b, "      rule: %s\n", res.Check.Rule)
		}
	}
	fmt.Fprintf(&b, "\n%d passed, %d failed, %d warned, %d skipped in %s", r.Count(Pass), r.Count(Fail), r.Count(Warn), r.Count(Skip), seconds(r.Duration))
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

// WriteJUnit writes the report as JUnit XML: a test case per check, classname
// kubedevice.plugin-test; a failure (and, with Strict, a warning) is a <failure>, a skip a
// <skipped>; the evidence is in <system-out>.
func (r *Report) WriteJUnit(w io.Writer) error {
	suite := junitSuite{
		Name: "kubedevice plugin test", Tests: len(r.Results), Time: fmt.Sprintf("%.3f", r.Duration.Seconds()),
		Properties: []junitProperty{{Name: "plugin", Value: r.Plugin}, {Name: "resource", Value: r.Resource}},
	}
	if r.Interrupted {
		suite.Properties = append(suite.Properties, junitProperty{Name: "interrupted", Value: "true"})
	}
	for _, res := range r.Results {
		c := junitCase{Name: res.Check.ID, Classname: "kubedevice.plugin-test", Time: fmt.Sprintf("%.3f", res.Duration.Seconds())}
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
	doc := junitSuites{Name: suite.Name, Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Time: suite.Time, Suites: []junitSuite{suite}}
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

func firstLine(evidence []string) string {
	if len(evidence) == 0 {
		return ""
	}
	line, _, _ := strings.Cut(evidence[0], "\n")
	return line
}
