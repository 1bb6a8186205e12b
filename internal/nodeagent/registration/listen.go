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

package registration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// SocketMode is the mode of the sockets the agent serves (the registration socket and the
// PodResources API's): read and write for their owner, root, only. The kubelet's sockets get
// the process umask (0755 under the usual 022), which lets only root connect too, since
// connecting needs write permission; the agent sets it explicitly instead of inheriting whatever
// umask its container runs with.
const SocketMode os.FileMode = 0o600

// ListenUnix listens on a unix socket at path whose mode is mode from the start: it binds a
// hidden temporary name in the same directory, sets the mode, and renames it into place, so no
// client ever finds path with the umask's mode (a chmod after binding leaves a window in which
// connections are accepted into the backlog). Whatever was at path is replaced; callers check
// it first. The listener does not unlink path when closed.
func ListenUnix(path string, mode os.FileMode) (*net.UnixListener, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("naming a temporary socket: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(b[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("setting the mode of socket %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("moving socket %s into place: %w", path, err)
	}
	return ln, nil
}
