// Command figures keeps the HA figures in the docs generated from a recorded run instead of
// typed in by hand.
//
//	figures collect -commit SHA REPORT.json...  the write checkers' reports of an e2e run, as a
//	                                            results file (JSON, on stdout)
//	figures render [-block ha|upgrade] RESULTS.json DOC.md...
//	                                            rewrites each DOC's generated block from it
//
// test/e2e/run.sh collects every run into bin/e2e-results.json; a run worth recording is copied
// to docs/results/e2e.json and `make figures` renders it. CI checks that the committed docs
// match the committed results file, not the noisy figures of its own run, which it prints.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// checkerSuffix ends the name of the report entry a write checker adds (test/e2e finish), and
// upgradeSuffix the one of a major upgrade benchmark (test/e2e benchMajorUpgrade).
const (
	checkerSuffix = ": write checker"
	upgradeSuffix = ": major upgrade"
)

// Results is one e2e run's write-checker figures.
type Results struct {
	Commit    string     `json:"commit"`
	Date      string     `json:"date"`
	Scenarios []Scenario `json:"scenarios"`
	Upgrades  []Upgrade  `json:"upgrades,omitempty"`
}

// Upgrade is what one major upgrade of the benchmark measured, durations in seconds.
type Upgrade struct {
	DatabaseMiB   int64     `json:"databaseMiB"`
	Passed        bool      `json:"passed"`
	LongestGap    float64   `json:"longestGapSeconds"`
	PgUpgrade     float64   `json:"pgUpgradeSeconds"`
	HABack        float64   `json:"haBackSeconds"`
	ArchivingBack float64   `json:"archivingBackSeconds"`
	Replicas      []Replica `json:"replicas"`
}

// Replica is how one instance was rebuilt on the new major.
type Replica struct {
	Name      string `json:"name"`
	Method    string `json:"method"`
	CopiedMiB int64  `json:"copiedMiB"`
	KeptMiB   int64  `json:"keptMiB"`
	// Reason: why a cheaper way failed.
	Reason string `json:"reason,omitempty"`
}

// upgradeReport is test/e2e's UpgradeFigures as ginkgo encodes it.
type upgradeReport struct {
	DatabaseMiB                                  int64
	LongestGap, PgUpgrade, HABack, ArchivingBack time.Duration
	Replicas                                     []struct {
		Name                   string `json:"name"`
		Method                 string `json:"method"`
		BytesCopied, BytesKept int64
		Reason                 string `json:"reason"`
	}
}

// Scenario is what one write checker saw, durations in seconds.
type Scenario struct {
	Name         string  `json:"name"`
	Passed       bool    `json:"passed"`
	Acknowledged int     `json:"acknowledged"`
	Failed       int     `json:"failed"`
	Lost         int     `json:"lost"`
	LongestGap   float64 `json:"longestGapSeconds"`
	TrailingGap  float64 `json:"trailingGapSeconds"`
	RTO          float64 `json:"rtoSeconds,omitempty"`
	Budget       float64 `json:"budgetSeconds,omitempty"`
}

// checkerReport is test/e2e's writeReport as ginkgo encodes it (durations in nanoseconds).
type checkerReport struct {
	Acknowledged, Failed, Lost   int
	LongestGap, TrailingGap, RTO time.Duration
	Budget                       time.Duration
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: figures collect -commit SHA REPORT.json... | figures render RESULTS.json DOC.md...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "collect":
		flags := flag.NewFlagSet("collect", flag.ExitOnError)
		commit := flags.String("commit", "", "the commit the run tested")
		_ = flags.Parse(os.Args[2:])
		err = collect(os.Stdout, *commit, time.Now().UTC(), flags.Args())
	case "render":
		flags := flag.NewFlagSet("render", flag.ExitOnError)
		block := flags.String("block", "ha", "the generated block to render: ha (the write checkers') or upgrade (the major upgrade benchmark's)")
		_ = flags.Parse(os.Args[2:])
		if flags.NArg() < 2 {
			err = errors.New("render needs a results file and at least one document")
			break
		}
		err = renderFiles(*block, flags.Arg(0), flags.Args()[1:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

// collect writes the results of the ginkgo JSON reports at paths; a missing report is a phase
// that did not run.
func collect(w io.Writer, commit string, now time.Time, paths []string) error {
	results := Results{Commit: commit, Date: now.Format("2006-01-02"), Scenarios: []Scenario{}}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		var reports []types.Report
		if err := json.Unmarshal(data, &reports); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, report := range reports {
			for _, spec := range report.SpecReports {
				scenarios, err := scenariosOf(spec)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				results.Scenarios = append(results.Scenarios, scenarios...)
				upgrades, err := upgradesOf(spec)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				results.Upgrades = append(results.Upgrades, upgrades...)
			}
		}
	}
	slices.SortStableFunc(results.Scenarios, func(a, b Scenario) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(results.Upgrades, func(a, b Upgrade) int { return int(a.DatabaseMiB - b.DatabaseMiB) })
	out, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

func scenariosOf(spec types.SpecReport) ([]Scenario, error) {
	var scenarios []Scenario
	for _, entry := range spec.ReportEntries {
		name, ok := strings.CutSuffix(entry.Name, checkerSuffix)
		if !ok {
			continue
		}
		var r checkerReport
		if err := json.Unmarshal([]byte(entry.Value.AsJSON), &r); err != nil {
			return nil, fmt.Errorf("report entry %q: %w", entry.Name, err)
		}
		scenarios = append(scenarios, Scenario{Name: name, Passed: !spec.Failed(), Acknowledged: r.Acknowledged,
			Failed: r.Failed, Lost: r.Lost, LongestGap: seconds(r.LongestGap), TrailingGap: seconds(r.TrailingGap),
			RTO: seconds(r.RTO), Budget: seconds(r.Budget)})
	}
	return scenarios, nil
}

func upgradesOf(spec types.SpecReport) ([]Upgrade, error) {
	var upgrades []Upgrade
	for _, entry := range spec.ReportEntries {
		if !strings.HasSuffix(entry.Name, upgradeSuffix) {
			continue
		}
		var r upgradeReport
		if err := json.Unmarshal([]byte(entry.Value.AsJSON), &r); err != nil {
			return nil, fmt.Errorf("report entry %q: %w", entry.Name, err)
		}
		u := Upgrade{DatabaseMiB: r.DatabaseMiB, Passed: !spec.Failed(), LongestGap: seconds(r.LongestGap),
			PgUpgrade: seconds(r.PgUpgrade), HABack: seconds(r.HABack), ArchivingBack: seconds(r.ArchivingBack)}
		for _, replica := range r.Replicas {
			u.Replicas = append(u.Replicas, Replica{Name: replica.Name, Method: replica.Method,
				CopiedMiB: replica.BytesCopied >> 20, KeptMiB: replica.BytesKept >> 20, Reason: replica.Reason})
		}
		upgrades = append(upgrades, u)
	}
	return upgrades, nil
}

func seconds(d time.Duration) float64 { return d.Round(100 * time.Millisecond).Seconds() }

// blocks are the generated blocks: their markers and how the results become their text.
var blocks = map[string]struct {
	begin, end string
	render     func(Results) string
}{
	"ha": {"<!-- figures:ha begin (generated by make figures from docs/results/e2e.json; do not edit) -->",
		"<!-- figures:ha end -->", render},
	"upgrade": {"<!-- figures:upgrade begin (generated by make figures from docs/results/major-upgrade.json; do not edit) -->",
		"<!-- figures:upgrade end -->", renderUpgrades},
}

func renderFiles(block, resultsPath string, docs []string) error {
	b, ok := blocks[block]
	if !ok {
		return fmt.Errorf("no generated block %q", block)
	}
	data, err := os.ReadFile(resultsPath)
	if err != nil {
		return err
	}
	var results Results
	if err := json.Unmarshal(data, &results); err != nil {
		return fmt.Errorf("%s: %w", resultsPath, err)
	}
	table := b.render(results)
	for _, doc := range docs {
		content, err := os.ReadFile(doc)
		if err != nil {
			return err
		}
		updated, err := replaceBlock(string(content), b.begin, b.end, table)
		if err != nil {
			return fmt.Errorf("%s: %w", doc, err)
		}
		if updated != string(content) {
			if err := os.WriteFile(doc, []byte(updated), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// render is the results as a markdown table.
func render(r Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded run: commit %s, %s (`make test` on 2 cores, specs 3 at a time).\n\n", shortCommit(r.Commit), r.Date)
	b.WriteString("| scenario | acknowledged writes | failed | acknowledged but lost | " +
		"writes resumed after the fault (budget) | longest gap | gap at the end | spec |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Scenarios {
		rto := "–"
		if s.RTO > 0 || s.Budget > 0 {
			rto = fmt.Sprintf("%.1f s (%.0f s)", s.RTO, s.Budget)
		}
		outcome := "passed"
		if !s.Passed {
			outcome = "failed"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %.1f s | %.1f s | %s |\n", s.Name, s.Acknowledged, s.Failed, s.Lost,
			rto, s.LongestGap, s.TrailingGap, outcome)
	}
	return b.String()
}

func shortCommit(c string) string {
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

// replaceBlock puts table between the markers of doc.
func replaceBlock(doc, beginMarker, endMarker, table string) (string, error) {
	begin := strings.Index(doc, beginMarker)
	end := strings.Index(doc, endMarker)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("no generated block (markers %s … %s)", beginMarker, endMarker)
	}
	return doc[:begin+len(beginMarker)] + "\n" + table + doc[end:], nil
}

// renderUpgrades is the major upgrade benchmark's results as a markdown table.
func renderUpgrades(r Results) string {
	if len(r.Upgrades) == 0 {
		return "No recorded run yet.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded run: commit %s, %s (`make bench-major-upgrade` on 2 cores, one size at a time).\n\n", shortCommit(r.Commit), r.Date)
	b.WriteString("| database | longest time without an acknowledged write | pg_upgrade | point of no return to a replica " +
		"streaming on the new major | … to the first archived segment | replicas rebuilt: copied / kept | spec |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, u := range r.Upgrades {
		replicas := make([]string, 0, len(u.Replicas))
		for _, replica := range u.Replicas {
			described := fmt.Sprintf("%s by %s: %d / %d MiB", replica.Name, replica.Method, replica.CopiedMiB, replica.KeptMiB)
			if replica.Reason != "" {
				described += " (" + strings.ReplaceAll(replica.Reason, "|", "/") + ")"
			}
			replicas = append(replicas, described)
		}
		outcome := "passed"
		if !u.Passed {
			outcome = "failed"
		}
		fmt.Fprintf(&b, "| %d MiB | %.1f s | %.1f s | %.1f s | %.1f s | %s | %s |\n", u.DatabaseMiB, u.LongestGap, u.PgUpgrade,
			u.HABack, u.ArchivingBack, strings.Join(replicas, "; "), outcome)
	}
	return b.String()
}
