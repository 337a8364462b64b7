package main

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

// phaseRunner runs the benchmark's phases against one control plane and operator.
type phaseRunner struct {
	ctx      context.Context
	cp       *controlplane.ControlPlane
	dir      string
	admin    client.Client
	auditLog string
	op       *operator
	cfg      config
	progress func(string)
}

// converge: every cluster created at once, until every child exists and the operator is quiet.
func (p *phaseRunner) converge(r *report) error {
	n := p.cfg.Clusters
	var err error
	if r.Empty, err = p.op.memory(p.ctx, 3); err != nil {
		return err
	}
	p.progress(fmt.Sprintf("converge: creating %d PostgresClusters at once", n))
	r.Converge, err = p.measureChange("converge",
		func() error { return createClusters(p.ctx, p.admin, n) },
		func() (bool, error) { return converged(p.ctx, p.admin, n) })
	return err
}

// measureChange makes a change to every cluster, waits until it is done and the operator is
// quiet, and counts the operator's requests per cluster meanwhile.
func (p *phaseRunner) measureChange(name string, change func() error, done func() (bool, error)) (phaseResult, error) {
	var result phaseResult
	start := time.Now()
	if err := change(); err != nil {
		return result, fmt.Errorf("%s: %w", name, err)
	}
	if err := waitFor(p.ctx, 10*time.Minute, func() bool {
		ok, err := done()
		return err == nil && ok
	}); err != nil {
		return result, fmt.Errorf("%s: %w", name, err)
	}
	result.Seconds = time.Since(start).Seconds()
	end, err := p.waitQuiet()
	if err != nil {
		return result, err
	}
	if result.Requests, err = p.window(start, end); err != nil {
		return result, err
	}
	result.RequestsPerCluster = float64(result.Requests.NonLeaseRequests) / float64(p.cfg.Clusters)
	return result, nil
}

// idle: the converged clusters wait at bootstrap; nothing should be written or read. In the
// first half they only wait, as clusters without a primary do. In the second, an agent's
// LeaseKeeper renews each cluster's primary Lease, as a running primary's agent does: the
// operator watches those renewals, which costs it CPU, and the agents' requests are counted.
func (p *phaseRunner) idle(r *report) error {
	half := p.cfg.Idle / 2
	p.progress(fmt.Sprintf("idle: leaving the clusters alone for %s", half))
	start := time.Now()
	waiting, err := p.measureIdle(half, p.cfg.CPUProfile)
	if err != nil {
		return err
	}
	p.progress(fmt.Sprintf("idle: %s more, each primary Lease renewed by an agent's LeaseKeeper", half))
	beats, err := p.startHeartbeats(p.dir)
	if err != nil {
		return err
	}
	renewStart := time.Now()
	renewing, err := p.measureIdle(half, "")
	beats.end()
	end := time.Now()
	if err != nil {
		return err
	}
	w, err := p.window(start, end)
	if err != nil {
		return err
	}
	requests, err := readAudit(p.auditLog)
	if err != nil {
		return err
	}
	agents := agentRequests(requests, renewStart, end)
	total := 0
	for _, n := range agents {
		total += n
	}
	minutes := end.Sub(start).Minutes()
	r.Idle = idleResult{
		AgentRequests:                    agents,
		AgentRequestsPerClusterPerMinute: float64(total) / float64(p.cfg.Clusters) / end.Sub(renewStart).Minutes(),
		Requests:                         w,
		WritesPerMinute:                  float64(w.Writes) / minutes,
		ReadsPerMinute:                   float64(w.Reads) / minutes,
		LeaderElectionRequestsPerMin:     float64(w.LeaderElection) / minutes,
		CPUMillisecondsPerMinute:         waiting.cpuPerMinute,
		RenewingCPUMillisecondsPerMinute: renewing.cpuPerMinute,
		ReconcilesPerClusterPerMinute:    waiting.reconciles / float64(p.cfg.Clusters) / half.Minutes(),
		ReconcileCPUSamples:              waiting.samples,
	}
	if waiting.reconciles > 0 {
		r.Idle.CPUMillisecondsPerReconcile = float64(waiting.reconcileCPU.Microseconds()) / 1000 / waiting.reconciles
	}
	return nil
}

// idleMeasure is the manager's CPU and reconciles over part of the idle phase.
type idleMeasure struct {
	cpuPerMinute, reconciles float64
	reconcileCPU             time.Duration
	samples                  int
}

// measureIdle profiles the manager for d (the profile request returns when d is over),
// writing the profile to save unless that is empty.
func (p *phaseRunner) measureIdle(d time.Duration, save string) (idleMeasure, error) {
	var m idleMeasure
	cpuBefore, reconcilesBefore, err := p.op.cpuAndReconciles()
	if err != nil {
		return m, err
	}
	start := time.Now()
	if m.reconcileCPU, m.samples, err = p.op.reconcileCPU(p.ctx, d, save); err != nil {
		return m, err
	}
	minutes := time.Since(start).Minutes()
	cpuAfter, reconcilesAfter, err := p.op.cpuAndReconciles()
	if err != nil {
		return m, err
	}
	m.cpuPerMinute = 1000 * (cpuAfter - cpuBefore) / minutes
	m.reconciles = reconcilesAfter - reconcilesBefore
	return m, nil
}

// churn: one spec change to every cluster.
func (p *phaseRunner) churn(r *report) error {
	n := p.cfg.Clusters
	p.progress(fmt.Sprintf("churn: changing a parameter of all %d clusters", n))
	var err error
	r.Churn, err = p.measureChange("churn",
		func() error { return changeEveryCluster(p.ctx, p.admin, n) },
		func() (bool, error) { return churnApplied(p.ctx, p.admin, n) })
	return err
}

// restart: a new manager process must pick up where the last one stopped, writing nothing.
// Its memory without unrelated objects is the cache-bound baseline.
func (p *phaseRunner) restart(r *report) error {
	p.progress("restart: a fresh manager over the converged clusters")
	start := time.Now()
	if err := p.restartOperator(); err != nil {
		return err
	}
	end, err := p.waitQuiet()
	if err != nil {
		return err
	}
	w, err := p.window(start, end)
	if err != nil {
		return err
	}
	r.Restart = w
	r.Memory, err = p.op.memory(p.ctx, 5)
	r.HeapKiBPerCluster = 1024 * (r.Memory.HeapMiB - r.Empty.HeapMiB) / float64(p.cfg.Clusters)
	return err
}

// cache: the same manager memory with many unrelated Secrets and ConfigMaps in the cluster.
func (p *phaseRunner) cache(r *report) error {
	if p.cfg.Unrelated == 0 {
		return nil
	}
	p.progress(fmt.Sprintf("cache bound: creating %d unrelated Secrets and %d ConfigMaps", p.cfg.Unrelated, p.cfg.Unrelated))
	if err := createUnrelated(p.ctx, p.admin, p.cfg.Unrelated); err != nil {
		return fmt.Errorf("create unrelated objects: %w", err)
	}
	if err := p.restartOperator(); err != nil {
		return err
	}
	if _, err := p.waitQuiet(); err != nil {
		return err
	}
	use, err := p.op.memory(p.ctx, 5)
	if err != nil {
		return err
	}
	r.Cache = &cacheResult{memoryUse: use,
		RSSGrowthMiB: use.RSSMiB - r.Memory.RSSMiB, HeapGrowthMiB: use.HeapMiB - r.Memory.HeapMiB}
	return nil
}

func (p *phaseRunner) restartOperator() error {
	p.op.stop()
	return p.op.start(p.ctx)
}

// waitQuiet waits until the operator made no request besides leader election for quietPeriod,
// and returns when its last request was.
func (p *phaseRunner) waitQuiet() (time.Time, error) {
	var last time.Time
	err := waitFor(p.ctx, 10*time.Minute, func() bool {
		requests, err := readAudit(p.auditLog)
		if err != nil {
			return false
		}
		last = lastNonLeaseRequest(requests)
		return time.Since(last) > quietPeriod
	})
	return last.Add(time.Millisecond), err
}

func (p *phaseRunner) window(from, to time.Time) (window, error) {
	requests, err := readAudit(p.auditLog)
	if err != nil {
		return window{}, err
	}
	return summarise(requests, from, to), nil
}
