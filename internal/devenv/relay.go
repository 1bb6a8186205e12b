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
	"fmt"
	"io"
	"net"
	"sync"
)

// relay serves a unix socket whose every connection is piped to another socket.
type relay struct {
	ln *net.UnixListener
	wg sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startRelay(path, target string) (*relay, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("serving a relay of the plugin's socket: %w", err)
	}
	r := &relay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(out, in); _ = out.(*net.UnixConn).CloseWrite() }()
			go func() { defer r.wg.Done(); _, _ = io.Copy(in, out); _ = in.(*net.UnixConn).CloseWrite() }()
		}
	}()
	return r, nil
}

// close stops the relay and its connections, and removes its socket.
func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
