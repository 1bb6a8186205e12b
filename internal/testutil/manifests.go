package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// LoadManifests reads the Kubernetes objects of the YAML (or JSON) files at paths, relative to the
// repository root, skipping empty documents.
func LoadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(RepoRoot(), p))
		if err != nil {
			return nil, fmt.Errorf("reading manifests: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			err := dec.Decode(&u.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("decoding %s: %w", p, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	return objs, nil
}
