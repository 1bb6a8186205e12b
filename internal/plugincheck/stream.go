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
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var errStreamEnded = errors.New("the ListAndWatch stream ended")

// listStream is an open ListAndWatch stream whose messages are read as they come.
type listStream struct {
	cancel context.CancelFunc
	msgs   chan *v1beta1.ListAndWatchResponse
	opened time.Time
	done   chan struct{}

	mu  sync.Mutex
	end error
}

// openListStream calls ListAndWatch, as the kubelet does, with no deadline.
func openListStream(ctx context.Context, client v1beta1.DevicePluginClient) (*listStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := client.ListAndWatch(ctx, &v1beta1.Empty{})
	if err != nil {
		cancel()
		return nil, err
	}
	s := &listStream{cancel: cancel, msgs: make(chan *v1beta1.ListAndWatchResponse, 64), opened: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			msg, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("%w: the plugin returned from ListAndWatch", errStreamEnded)
				} else {
					err = fmt.Errorf("%w: %w", errStreamEnded, err)
				}
				s.mu.Lock()
				s.end = err
				s.mu.Unlock()
				return
			}
			select {
			case s.msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s, nil
}

// next returns the next message, waiting at most timeout.
func (s *listStream) next(timeout time.Duration) (*v1beta1.ListAndWatchResponse, error) {
	t := time.NewTimer(max(timeout, 0))
	defer t.Stop()
	select {
	case msg := <-s.msgs:
		return msg, nil
	case <-s.done:
		select {
		case msg := <-s.msgs:
			return msg, nil
		default:
		}
		return nil, s.ended()
	case <-t.C:
		return nil, fmt.Errorf("no ListAndWatch message within %s", seconds(timeout))
	}
}

// ended returns why the stream ended, or nil while it is open.
func (s *listStream) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// close ends the stream from the kubelet's side.
func (s *listStream) close() {
	s.cancel()
	<-s.done
}
