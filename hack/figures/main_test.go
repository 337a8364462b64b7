package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// A run's report, as ginkgo writes it, becomes a results file, and the results a table in the
// block of a document, leaving the rest of it as it was.
func TestCollectAndRender(t *testing.T) {
	report := checkerReport{Acknowledged: 9000, Failed: 40, LongestGap: 6200 * time.Millisecond,
		TrailingGap: 10 * time.Millisecond, RTO: 5800 * time.Millisecond, Budget: 30 * time.Second}
	reports := []types.Report{{SpecReports: types.SpecReports{
		{State: types.SpecStatePassed, ReportEntries: types.ReportEntries{
			{Name: "kill -9" + checkerSuffix, Value: types.WrapEntryValue(report)},
			{Name: "kill -9: fault to Ready", Value: types.WrapEntryValue("7 s")},
		}},
		{State: types.SpecStateFailed, ReportEntries: types.ReportEntries{
			{Name: "frozen" + checkerSuffix, Value: types.WrapEntryValue(map[string]int{"Acknowledged": 1, "Lost": 1})},
		}},
	}}}
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.json")
	data, _ := json.Marshal(reports)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := collect(&out, "0123456789abcdef", time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), []string{path, filepath.Join(dir, "olm.json")}); err != nil {
		t.Fatal(err)
	}
	var results Results
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatal(err)
	}
	if len(results.Scenarios) != 2 || results.Scenarios[1].Name != "kill -9" || results.Scenarios[1].RTO != 5.8 ||
		results.Scenarios[0].Passed || !results.Scenarios[1].Passed {
		t.Fatalf("results %+v", results)
	}
	beginMarker, endMarker := blocks["ha"].begin, blocks["ha"].end
	doc := "# Title\n\nbefore\n" + beginMarker + "\nstale\n" + endMarker + "\nafter\n"
	got, err := replaceBlock(doc, beginMarker, endMarker, render(results))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"commit 0123456, 2026-12-03", "| kill -9 | 9000 | 40 | 0 | 5.8 s (30 s) | 6.2 s | 0.0 s | passed |",
		"| frozen | 1 | 0 | 1 | – |", "before\n" + beginMarker, endMarker + "\nafter\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered document lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "stale") {
		t.Errorf("the old block was kept:\n%s", got)
	}
	if _, err := replaceBlock("no markers", beginMarker, endMarker, "x"); err == nil {
		t.Error("a document without the block was accepted")
	}
}

// The major upgrade benchmark's entries become the upgrade block's table, smallest database first.
func TestCollectAndRenderUpgrades(t *testing.T) {
	type replica struct {
		Name        string `json:"name"`
		Method      string `json:"method"`
		BytesCopied int64  `json:"bytesCopied"`
		BytesKept   int64  `json:"bytesKept"`
	}
	figures := func(mib int64, gap time.Duration) any {
		return struct {
			DatabaseMiB                                  int64
			LongestGap, PgUpgrade, HABack, ArchivingBack time.Duration
			Replicas                                     []replica
		}{mib, gap, 2500 * time.Millisecond, 4 * time.Second, 9 * time.Second,
			[]replica{{"db-0", "link", 46 << 20, mib << 20}}}
	}
	reports := []types.Report{{SpecReports: types.SpecReports{
		{State: types.SpecStatePassed, ReportEntries: types.ReportEntries{
			{Name: "10240 MiB" + upgradeSuffix, Value: types.WrapEntryValue(figures(10240, 14*time.Second))}}},
		{State: types.SpecStatePassed, ReportEntries: types.ReportEntries{
			{Name: "1024 MiB" + upgradeSuffix, Value: types.WrapEntryValue(figures(1024, 12*time.Second))}}},
	}}}
	path := filepath.Join(t.TempDir(), "deploy.json")
	data, _ := json.Marshal(reports)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := collect(&out, "0123456789abcdef", time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC), []string{path}); err != nil {
		t.Fatal(err)
	}
	var results Results
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatal(err)
	}
	table := renderUpgrades(results)
	small := "| 1024 MiB | 12.0 s | 2.5 s | 4.0 s | 9.0 s | db-0 by link: 46 / 1024 MiB | passed |"
	large := "| 10240 MiB | 14.0 s |"
	if !strings.Contains(table, small) || !strings.Contains(table, large) || strings.Index(table, small) > strings.Index(table, large) {
		t.Fatalf("upgrade table:\n%s", table)
	}
}
