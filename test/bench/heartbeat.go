package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// agentUser is the identity the simulated primaries' agents renew their Leases as; the audit
// policy logs its requests too, apart from the operator's.
const agentUser = "pgpilot-agent"

// agentRole lets the agents do what a cluster's instance Role lets them: read and renew Leases.
const agentRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: pgpilot-bench-agent
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "update"]
`

// heartbeats plays the primary's agent of every cluster: the agent's own LeaseKeeper renews
// each cluster's primary Lease, driven by a one-second tick as in the agent, until stop.
type heartbeats struct {
	keepers []*agent.LeaseKeeper
	stop    context.CancelFunc
	done    sync.WaitGroup
}

func (p *phaseRunner) startHeartbeats(dir string) (*heartbeats, error) {
	roleFile := filepath.Join(dir, "agent-role.yaml")
	if err := os.WriteFile(roleFile, []byte(agentRole), 0o600); err != nil {
		return nil, err
	}
	kubeconfig, err := p.cp.UserKubeconfig(p.ctx, p.admin, agentUser, roleFile, benchNamespace)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	// Every agent has a client of its own; one client playing them all must not throttle them.
	cfg.QPS, cfg.Burst = 1000, 1000
	leases, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := &heartbeats{}
	for i := range p.cfg.Clusters {
		name := fmt.Sprintf("db-%04d", i)
		k := &agent.LeaseKeeper{Holder: name + "-0",
			Store: &agent.KubeLeases{Client: leases, Namespace: benchNamespace, Name: agentapi.LeaseName(name)}}
		if _, err := k.Read(p.ctx); err != nil {
			return nil, fmt.Errorf("primary lease of %s: %w", name, err)
		}
		h.keepers = append(h.keepers, k)
	}
	ctx, stop := context.WithCancel(p.ctx)
	h.stop = stop
	// Each agent renews on its own; one loop over a thousand of them, a request at a time,
	// would fall behind the five-second rhythm.
	for shard := range heartbeatShards {
		h.done.Add(1)
		go h.renew(ctx, shard)
	}
	return h, nil
}

// heartbeatShards is how many goroutines renew the Leases, each for every heartbeatShards-th one.
const heartbeatShards = 16

func (h *heartbeats) renew(ctx context.Context, shard int) {
	defer h.done.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for i := shard; i < len(h.keepers); i += heartbeatShards {
				_, _, _ = h.keepers[i].RenewIfDue(ctx, now)
			}
		}
	}
}

func (h *heartbeats) end() {
	h.stop()
	h.done.Wait()
}
