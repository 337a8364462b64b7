package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// budgets are the counts a change is held to (budgets.yaml).
type budgets struct {
	IdleWritesPerMinuteBeyondLeaderElection float64 `json:"idleWritesPerMinuteBeyondLeaderElection"`
	IdleUncachedReadsPerMinute              float64 `json:"idleUncachedReadsPerMinute"`
	IdleLeaderElectionRequestsPerMinute     float64 `json:"idleLeaderElectionRequestsPerMinute"`
	RestartWrites                           int     `json:"restartWrites"`
	RestartEvents                           int     `json:"restartEvents"`
	CacheGrowthMiB                          float64 `json:"cacheGrowthMiB"`
	MaxRequestsPerConvergedCluster          float64 `json:"maxRequestsPerConvergedCluster"`
	MaxRequestsPerChangedCluster            float64 `json:"maxRequestsPerChangedCluster"`
	AgentRequestsPerClusterPerMinute        float64 `json:"agentRequestsPerClusterPerMinute"`
	// Enforced only where the measurement is stable enough (see budgets.yaml).
	MaxIdleReconcileCPUMilliseconds float64 `json:"maxIdleReconcileCPUMilliseconds"`
	MinReconcileCPUSamples          int     `json:"minReconcileCPUSamples"`
	MaxIdleCPUPercentPer100Clusters float64 `json:"maxIdleCPUPercentPer100Clusters"`
	MaxHeapKiBPerCluster            float64 `json:"maxHeapKiBPerCluster"`
	MinClustersForPerClusterBudgets int     `json:"minClustersForPerClusterBudgets"`
}

func loadBudgets(path string) (budgets, error) {
	var b budgets
	data, err := os.ReadFile(path)
	if err != nil {
		return b, err
	}
	return b, yaml.UnmarshalStrict(data, &b)
}

// violations compares a report with the budgets; each line is one budget exceeded.
func (b budgets) violations(r *report) []string {
	var out []string
	check := func(name string, got, limit float64) {
		if got > limit {
			out = append(out, fmt.Sprintf("%s: %.2f exceeds the budget of %.2f", name, got, limit))
		}
	}
	check("idle writes/min beyond leader election", r.Idle.WritesPerMinute, b.IdleWritesPerMinuteBeyondLeaderElection)
	check("idle uncached reads/min", r.Idle.ReadsPerMinute, b.IdleUncachedReadsPerMinute)
	check("idle leader election requests/min", r.Idle.LeaderElectionRequestsPerMin, b.IdleLeaderElectionRequestsPerMinute)
	check("writes after a restart", float64(r.Restart.Writes), float64(b.RestartWrites))
	check("events after a restart", float64(r.Restart.Events), float64(b.RestartEvents))
	check("idle events", float64(r.Idle.Requests.Events), 0)
	if r.Cache != nil {
		check("cache growth (heap MiB)", r.Cache.HeapGrowthMiB, b.CacheGrowthMiB)
	}
	check("requests per converged cluster", r.Converge.RequestsPerCluster, b.MaxRequestsPerConvergedCluster)
	check("requests per changed cluster", r.Churn.RequestsPerCluster, b.MaxRequestsPerChangedCluster)
	check("primary's agent Lease requests/min per cluster", r.Idle.AgentRequestsPerClusterPerMinute, b.AgentRequestsPerClusterPerMinute)
	if r.Idle.ReconcileCPUSamples >= b.MinReconcileCPUSamples {
		check("CPU per idle reconcile (ms)", r.Idle.CPUMillisecondsPerReconcile, b.MaxIdleReconcileCPUMilliseconds)
	}
	if r.Config.Clusters >= b.MinClustersForPerClusterBudgets {
		check("idle CPU per 100 clusters (% of a core)", r.idleCPUPercentPer100Clusters(), b.MaxIdleCPUPercentPer100Clusters)
		check("Go heap per cluster (KiB)", r.HeapKiBPerCluster, b.MaxHeapKiBPerCluster)
	}
	return out
}
