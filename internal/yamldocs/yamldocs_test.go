package yamldocs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // the documents, trimmed
		wantErr string
	}{
		{name: "empty", in: ""},
		{name: "one document", in: "a: 1\n", want: []string{"a: 1"}},
		// A leading separator stays with the first document, which YAML reads the same.
		{name: "leading and trailing separators", in: "---\na: 1\n---\nb: 2\n---\n", want: []string{"---\na: 1", "b: 2"}},
		{name: "comment-only and null documents are dropped", in: "# header\n---\na: 1\n---\n# nothing\n---\nnull\n",
			want: []string{"a: 1"}},
		{name: "documents keep their text", in: "a: 1 # kept\n---\nb:\n  - x\n", want: []string{"a: 1 # kept", "b:\n  - x"}},
		{name: "JSON is YAML", in: `{"schema":"olm.package","name":"p"}`, want: []string{`{"schema":"olm.package","name":"p"}`}},
		{name: "invalid document", in: "a: 1\n---\nb: [\n", wantErr: "YAML document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := Split([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Split error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, strings.TrimSpace(string(d)))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadFileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(path, []byte("a: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile error %v, want one naming %s", err, path)
	}
}
