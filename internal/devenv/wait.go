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
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// errTimedOut is the cause of a wait that ran out of time.
var errTimedOut = errors.New("timed out")

// condition reports whether what a wait waits for has happened; when it has not, seen says what
// was observed instead. An error is observed too: the wait goes on (the API server may be busy).
type condition func(ctx context.Context) (done bool, seen string, err error)

// waitFor polls cond until it is done, the timeout passes, ctx ends, or a component stops. What
// names the awaited event in the error ("gopher-pod to be bound to demo-node"); logs names the
// components whose log tails the error shows, and the author's plugins whose end fails the wait.
func (d *dev) waitFor(ctx context.Context, what string, logs []string, cond condition) error {
	deadline := time.Now().Add(d.opts.Timeout)
	var seen string
	for {
		if err := d.componentStopped(logs); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		done, s, err := cond(reqCtx)
		cancel()
		switch {
		case err != nil:
			seen = err.Error()
		case done:
			return nil
		default:
			seen = s
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
		if time.Now().After(deadline) {
			var tails strings.Builder
			for _, name := range logs {
				tails.WriteString(logTail(name, d.l.logPath(name)))
			}
			return fmt.Errorf("waiting for %s: %w after %s; last seen: %s%s", what, errTimedOut, d.opts.Timeout, seen, tails.String())
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

// progress prints the steps of kubedevice dev, one line each, with how long each took.
type progress struct {
	w     io.Writer
	start time.Time
}

// stepWidth is the width the step titles are padded to with dots.
const stepWidth = 54

// run prints title, runs f, and completes the line with the time f took and the detail it
// returned, or "failed".
func (p *progress) run(title string, f func() (detail string, err error)) error {
	dots := stepWidth - len(title) - 1
	fmt.Fprintf(p.w, "%s %s ", title, strings.Repeat(".", max(dots, 3)))
	start := time.Now()
	detail, err := f()
	d := time.Since(start)
	if err != nil {
		fmt.Fprintf(p.w, "failed after %s\n", seconds(d))
		return err
	}
	if detail != "" {
		detail = "  " + detail
	}
	fmt.Fprintf(p.w, "%6s%s\n", seconds(d), detail)
	return nil
}

// seconds formats d as seconds with one decimal: 4.2s.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
