// Command digest prints, from ginkgo JSON reports, a short account of every failed spec: where
// and why it failed, and the "digest" report entry the e2e suite adds on failure. test/e2e/run.sh
// prints it last, because a CI log is often read from its tail only.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// entryName is the report entry the e2e suite adds on failure (digestEntry there).
const entryName = "digest"

// Bounds that keep the digest within the tail of a log a reader sees.
const (
	detailedFailures = 2
	messageLines     = 10
	entryLines       = 30
)

func main() {
	failed := 0
	for _, path := range os.Args[1:] {
		n, err := digest(os.Stdout, path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "digest %s: %v\n", path, err)
			os.Exit(1)
		}
		failed += n
	}
	if failed > 0 {
		fmt.Printf("=== e2e failure digest: %d failed spec(s); the full output is above\n", failed)
	}
}

// digest writes the failures of one report file and returns how many there were. A missing
// file is no failure: the phase did not run.
func digest(w io.Writer, path string) (int, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return 0, err
	}
	failed := 0
	for _, report := range reports {
		for _, spec := range report.SpecReports {
			if !spec.Failed() {
				continue
			}
			failed++
			if failed > detailedFailures {
				fmt.Fprintf(w, "--- [%s] %s (details above)\n", spec.State, spec.FullText())
				continue
			}
			writeFailure(w, spec)
		}
	}
	return failed, nil
}

// writeFailure puts the spec's failure message last: a log's reader often sees only its last
// twenty lines, and the events and logs of the entry mean little without the message.
func writeFailure(w io.Writer, spec types.SpecReport) {
	for _, entry := range spec.ReportEntries {
		if entry.Name == entryName {
			fmt.Fprintf(w, "--- what the cluster said while %q failed:\n", spec.LeafNodeText)
			writeCapped(w, entry.StringRepresentation(), entryLines)
		}
	}
	fmt.Fprintf(w, "--- [%s] %s\n", spec.State, spec.FullText())
	location := spec.Failure.Location
	fmt.Fprintf(w, "    at %s:%d after %s\n", filepath.Base(location.FileName), location.LineNumber,
		spec.RunTime.Round(1e9))
	writeCapped(w, spec.Failure.Message, messageLines)
}

func writeCapped(w io.Writer, text string, lines int) {
	all := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for _, line := range all[:min(len(all), lines)] {
		fmt.Fprintf(w, "    %s\n", line)
	}
	if len(all) > lines {
		fmt.Fprintf(w, "    (%d more lines in the full output)\n", len(all)-lines)
	}
}
