// Package yamldocs splits multi-document YAML files (bundle manifests, catalog files, kustomize
// output) into their documents, the one way every reader of them in this repository does it.
package yamldocs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Split returns the documents of a YAML stream that hold something. A document of only
// comments, or an empty one (a leading or trailing ---), would otherwise reach the caller as an
// object without a kind or schema. The documents are returned as written, not converted to
// JSON, so that a strict decode still sees duplicate keys and reports lines of the file.
func Split(data []byte) ([][]byte, error) {
	var docs [][]byte
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", n, err)
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", n, err)
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// ReadFile splits the file at path; errors name it.
func ReadFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs, err := Split(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return docs, nil
}
