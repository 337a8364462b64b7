package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

type report struct {
	Config   config      `json:"config"`
	Machine  string      `json:"machine"`
	Converge phaseResult `json:"converge"`
	Idle     idleResult  `json:"idle"`
	Churn    phaseResult `json:"churn"`
	// Restart is what a fresh manager did over the converged clusters.
	Restart window `json:"restart"`
	// Empty is the manager's memory before any cluster exists.
	Empty memoryUse `json:"emptyMemory"`
	// Memory of a fresh manager over the clusters, without unrelated objects.
	Memory memoryUse `json:"memory"`
	// HeapKiBPerCluster is the heap beyond Empty's, per cluster.
	HeapKiBPerCluster float64      `json:"heapKiBPerCluster"`
	Cache             *cacheResult `json:"cache,omitempty"`
}

type phaseResult struct {
	Seconds            float64 `json:"seconds"`
	RequestsPerCluster float64 `json:"requestsPerCluster"`
	Requests           window  `json:"requests"`
}

type idleResult struct {
	WritesPerMinute              float64 `json:"writesPerMinute"`
	ReadsPerMinute               float64 `json:"uncachedReadsPerMinute"`
	LeaderElectionRequestsPerMin float64 `json:"leaderElectionRequestsPerMinute"`
	// CPUMillisecondsPerMinute is the manager's while the clusters only wait (no primary renews
	// a Lease); RenewingCPUMillisecondsPerMinute while each cluster's primary Lease is renewed.
	CPUMillisecondsPerMinute         float64 `json:"cpuMillisecondsPerMinute"`
	RenewingCPUMillisecondsPerMinute float64 `json:"renewingCPUMillisecondsPerMinute"`
	// Reconciles of PostgresClusters while waiting, and the CPU a CPU profile found under
	// Reconcile per reconcile, from ReconcileCPUSamples samples (100 a second of CPU).
	ReconcilesPerClusterPerMinute float64 `json:"reconcilesPerClusterPerMinute"`
	CPUMillisecondsPerReconcile   float64 `json:"cpuMillisecondsPerReconcile"`
	ReconcileCPUSamples           int     `json:"reconcileCPUSamples"`
	Requests                      window  `json:"requests"`
	// AgentRequests are the primaries' agents' Lease renewals meanwhile, by verb.
	AgentRequests                    map[string]int `json:"agentRequests"`
	AgentRequestsPerClusterPerMinute float64        `json:"agentRequestsPerClusterPerMinute"`
}

type cacheResult struct {
	memoryUse
	RSSGrowthMiB  float64 `json:"rssGrowthMiB"`
	HeapGrowthMiB float64 `json:"heapGrowthMiB"`
}

// idleCPUPercentPer100Clusters is the manager's CPU while the clusters wait, as a share of one
// core, per 100 clusters.
func (r *report) idleCPUPercentPer100Clusters() float64 {
	return r.Idle.CPUMillisecondsPerMinute / 60000 * 100 * 100 / float64(r.Config.Clusters)
}

func (r *report) print(out io.Writer) {
	fmt.Fprintf(out, "\npgpilot benchmark: %d clusters, idle %s, %d unrelated objects per kind (%s)\n\n",
		r.Config.Clusters, r.Config.Idle, r.Config.Unrelated, r.Machine)
	t := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(cells ...any) {
		parts := make([]string, len(cells))
		for i, c := range cells {
			parts[i] = fmt.Sprint(c)
		}
		fmt.Fprintln(t, strings.Join(parts, "\t"))
	}
	row("phase", "measure", "value")
	row("converge", "time until every child exists (s)", fmt.Sprintf("%.1f", r.Converge.Seconds))
	row("converge", "API requests per cluster", fmt.Sprintf("%.2f", r.Converge.RequestsPerCluster))
	row("idle", "writes/min (besides leader election)", fmt.Sprintf("%.2f", r.Idle.WritesPerMinute))
	row("idle", "uncached reads/min", fmt.Sprintf("%.2f", r.Idle.ReadsPerMinute))
	row("idle", "leader election requests/min", fmt.Sprintf("%.2f", r.Idle.LeaderElectionRequestsPerMin))
	row("idle", "operator CPU while waiting (ms/min; % of a core per 100 clusters)",
		fmt.Sprintf("%.0f (%.2f %%)", r.Idle.CPUMillisecondsPerMinute, r.idleCPUPercentPer100Clusters()))
	row("idle", "operator CPU with every primary Lease renewed (ms/min)", fmt.Sprintf("%.0f", r.Idle.RenewingCPUMillisecondsPerMinute))
	row("idle", "reconciles/min per cluster", fmt.Sprintf("%.2f", r.Idle.ReconcilesPerClusterPerMinute))
	row("idle", "CPU per reconcile (ms; profile samples)", fmt.Sprintf("%.3f (%d)", r.Idle.CPUMillisecondsPerReconcile, r.Idle.ReconcileCPUSamples))
	row("idle", "primary's agent: Lease requests/min per cluster", fmt.Sprintf("%.2f", r.Idle.AgentRequestsPerClusterPerMinute))
	row("churn", "time to roll a parameter into all (s)", fmt.Sprintf("%.1f", r.Churn.Seconds))
	row("churn", "API requests per changed cluster", fmt.Sprintf("%.2f", r.Churn.RequestsPerCluster))
	row("restart", "writes by a fresh manager", r.Restart.Writes)
	row("memory", "with no cluster: RSS / anonymous RSS / Go heap (MiB)", r.Empty)
	row("memory", "RSS / anonymous RSS / Go heap (MiB)", r.Memory)
	row("memory", "Go heap per cluster (KiB)", fmt.Sprintf("%.1f", r.HeapKiBPerCluster))
	if r.Cache != nil {
		row("cache bound", "RSS / anonymous RSS / Go heap with unrelated objects (MiB)", r.Cache.memoryUse)
		row("cache bound", "growth RSS / Go heap (MiB)", fmt.Sprintf("%+.1f / %+.1f", r.Cache.RSSGrowthMiB, r.Cache.HeapGrowthMiB))
	}
	_ = t.Flush()
	for _, phase := range []struct {
		name string
		w    window
	}{{"converge", r.Converge.Requests}, {"idle", r.Idle.Requests}, {"idle (agents)", window{ByVerbResource: r.Idle.AgentRequests}},
		{"churn", r.Churn.Requests}, {"restart", r.Restart}} {
		fmt.Fprintf(out, "\n%s requests by verb and resource:\n", phase.name)
		keys := make([]string, 0, len(phase.w.ByVerbResource))
		for k := range phase.w.ByVerbResource {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "  %-45s %d\n", k, phase.w.ByVerbResource[k])
		}
	}
}
