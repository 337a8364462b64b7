package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

func failedSpec(text, message, entry string) types.SpecReport {
	return types.SpecReport{
		ContainerHierarchyTexts: []string{"A cluster"},
		LeafNodeText:            text,
		State:                   types.SpecStateFailed,
		RunTime:                 61 * time.Second,
		Failure: types.Failure{Message: message,
			Location: types.CodeLocation{FileName: "/check/test/e2e/cluster_test.go", LineNumber: 132}},
		ReportEntries: types.ReportEntries{
			{Name: "operator log", Value: types.WrapEntryValue("not in the digest")},
			{Name: "digest", Value: types.WrapEntryValue(entry)},
		},
	}
}

func TestDigestPrintsFailuresWithTheirDigestEntryOnly(t *testing.T) {
	report := types.Report{SpecReports: types.SpecReports{
		{LeafNodeText: "passes", State: types.SpecStatePassed},
		failedSpec("turns Degraded", "Expected\n    <string>: AsExpected\nto equal\n    <string>: InstancesUnschedulable",
			"namespace e2e-noclass-x:\n  cluster noclass phase=Bootstrapping"),
		failedSpec("second", "m2", "e2"),
		failedSpec("third", strings.Repeat("line\n", 50), "e3"),
	}}
	data, err := json.Marshal([]types.Report{report})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "deploy.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	reports, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if n := digest(&out, reports); n != 3 {
		t.Errorf("counted %d failures, want 3", n)
	}
	text := out.String()
	for _, want := range []string{
		"--- [failed] A cluster turns Degraded\n    at cluster_test.go:132 after 1m1s\n",
		"<string>: InstancesUnschedulable", "cluster noclass phase=Bootstrapping",
		"--- [failed] A cluster third (details above)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("digest lacks %q:\n%s", want, text)
		}
	}
	if strings.Index(text, "cluster noclass phase") > strings.Index(text, "InstancesUnschedulable") {
		t.Errorf("the failure message should come after what the cluster said:\n%s", text)
	}
	for _, unwanted := range []string{"passes", "not in the digest", "line\n"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("digest has %q:\n%s", unwanted, text)
		}
	}
}

func TestAPhaseThatDidNotRunHasNoReports(t *testing.T) {
	reports, err := load(filepath.Join(t.TempDir(), "olm.json"))
	if err != nil || reports != nil {
		t.Errorf("got %v, %v; want nothing", reports, err)
	}
}

func TestTimingsListTheSlowestGroupsWithTheirProcess(t *testing.T) {
	start := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	spec := func(containers []string, process int, offset, runTime time.Duration) types.SpecReport {
		return types.SpecReport{ContainerHierarchyTexts: containers, LeafNodeType: types.NodeTypeIt,
			State: types.SpecStatePassed, ParallelProcess: process, StartTime: start.Add(offset), RunTime: runTime}
	}
	upgrade := []string{"A major upgrade"}
	report := types.Report{StartTime: start, RunTime: 400 * time.Second, SpecReports: types.SpecReports{
		spec(upgrade, 1, 10*time.Second, 100*time.Second),
		spec(upgrade, 1, 110*time.Second, 200*time.Second),
		spec([]string{"Failover"}, 2, 0, 250*time.Second),
		{LeafNodeType: types.NodeTypeIt, State: types.SpecStateSkipped, ParallelProcess: 2, RunTime: time.Hour},
		{LeafNodeType: types.NodeTypeSynchronizedBeforeSuite, ParallelProcess: 1, RunTime: time.Hour},
	}}
	var out strings.Builder
	writeTimings(&out, "deploy", []types.Report{report})
	want := "=== e2e time, deploy: 6m40s, busy per process 1: 300s, 2: 250s; the slowest spec groups:\n" +
		"      300s  process 1 from +10s  A major upgrade (2 specs)\n" +
		"      250s  process 2 from +0s  Failover (1 specs)\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestWriteCappedSaysWhatItLeftOut(t *testing.T) {
	var out strings.Builder
	writeCapped(&out, "a\nb\nc\n", 2)
	if want := "    a\n    b\n    (1 more lines in the full output)\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
