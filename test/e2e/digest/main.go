// Command digest prints, from ginkgo JSON reports (one per phase, named after it), how long each
// phase and its slowest spec groups took, then a short account of every failed spec: where and
// why it failed, and the "digest" report entry the e2e suite adds on failure. test/e2e/run.sh
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
	phases := map[string][]types.Report{}
	names := make([]string, 0, len(os.Args)-1)
	for _, path := range os.Args[1:] {
		reports, err := load(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "digest %s: %v\n", path, err)
			os.Exit(1)
		}
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		phases[name] = reports
		names = append(names, name)
	}
	for _, name := range names {
		writeTimings(os.Stdout, name, phases[name])
	}
	failed := 0
	for _, name := range names {
		failed += digest(os.Stdout, phases[name])
	}
	if failed > 0 {
		fmt.Printf("=== e2e failure digest: %d failed spec(s); the full output is above\n", failed)
	}
}

// load reads one phase's ginkgo JSON report. A missing file is no failure: the phase did not
// run.
func load(path string) ([]types.Report, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, err
	}
	return reports, nil
}

// digest writes the failures of one phase's reports and returns how many there were.
func digest(w io.Writer, reports []types.Report) int {
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
	return failed
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
