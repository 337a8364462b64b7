package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// slowestGroups bounds the timing account to what a reader of a CI log compares between runs.
const slowestGroups = 12

// specGroup is the specs of one container, which an Ordered container runs on one process one
// after the other: the unit a phase's length is made of.
type specGroup struct {
	name    string
	specs   int
	process int
	start   time.Time
	runTime time.Duration
}

// writeTimings prints how long a phase ran, how busy each of its processes was, and its slowest
// spec groups with the process and moment each started, so that a run's length can be read from
// its log without the JSON report.
func writeTimings(w io.Writer, phase string, reports []types.Report) {
	for _, report := range reports {
		groups, busy := groupSpecs(report)
		if len(groups) == 0 {
			continue
		}
		fmt.Fprintf(w, "=== e2e time, %s: %s, busy per process %s; the slowest spec groups:\n",
			phase, report.RunTime.Round(time.Second), busyList(busy))
		for _, g := range groups[:min(len(groups), slowestGroups)] {
			fmt.Fprintf(w, "    %5.0fs  process %d from +%.0fs  %s (%d specs)\n", g.runTime.Seconds(), g.process,
				g.start.Sub(report.StartTime).Seconds(), g.name, g.specs)
		}
	}
}

// groupSpecs sums the specs that ran by their outermost containers, slowest first, and the
// time each process spent in specs.
func groupSpecs(report types.Report) ([]specGroup, map[int]time.Duration) {
	byName := map[string]*specGroup{}
	busy := map[int]time.Duration{}
	for _, spec := range report.SpecReports {
		if spec.LeafNodeType != types.NodeTypeIt || spec.State == types.SpecStateSkipped {
			continue
		}
		name := groupName(spec)
		g := byName[name]
		if g == nil {
			g = &specGroup{name: name, process: spec.ParallelProcess, start: spec.StartTime}
			byName[name] = g
		}
		g.specs++
		g.runTime += spec.RunTime
		if spec.StartTime.Before(g.start) {
			g.start = spec.StartTime
		}
		busy[spec.ParallelProcess] += spec.RunTime
	}
	groups := make([]specGroup, 0, len(byName))
	for _, g := range byName {
		groups = append(groups, *g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].runTime > groups[j].runTime })
	return groups, busy
}

// groupName is the spec's containers, or its file for a spec outside any.
func groupName(spec types.SpecReport) string {
	if len(spec.ContainerHierarchyTexts) == 0 {
		return filepath.Base(spec.LeafNodeLocation.FileName)
	}
	return strings.Join(spec.ContainerHierarchyTexts, " / ")
}

func busyList(busy map[int]time.Duration) string {
	processes := make([]int, 0, len(busy))
	for p := range busy {
		processes = append(processes, p)
	}
	sort.Ints(processes)
	parts := make([]string, 0, len(processes))
	for _, p := range processes {
		parts = append(parts, fmt.Sprintf("%d: %.0fs", p, busy[p].Seconds()))
	}
	return strings.Join(parts, ", ")
}
