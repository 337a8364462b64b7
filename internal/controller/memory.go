package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
)

// Memory is what the operator process remembers of each cluster between reconciles. None of it
// is needed after a restart: the agents' TLS client configurations (shared with the backup
// reconcilers, AgentTLS) are made again from the CA Secret, the record of children found up to
// date only saves work, the log notices announced only spare repeated Events, the managed roles last sent only spare
// reading their Secrets. The primary
// Leases' tracker, keyed by the cluster's UID, has its own lifecycle (postgrescluster_lease.go).
// forget clears a cluster from all of it, in one place.
type Memory struct {
	agentTLS   agentclient.TLSConfigs
	unchanged  unchangedChildren
	logNotices logNoticesSeen
	roles      rolesMemory
}

func (m *Memory) forget(cluster types.NamespacedName) {
	m.agentTLS.Forget(cluster)
	m.unchanged.forget(cluster)
	m.logNotices.forget(cluster)
	m.roles.forget(cluster)
}

func (r *PostgresClusterReconciler) memory() *Memory { return givenOrOwn(&r.memoryOnce, &r.Memory) }

// AgentTLS is the agents' TLS client configurations, for the backup reconcilers, which share
// them with the cluster reconciler (and so are pruned with it).
func (m *Memory) AgentTLS() *agentclient.TLSConfigs { return &m.agentTLS }

// givenOrOwn is the Memory a reconciler was given, or one of its own.
func givenOrOwn(once *sync.Once, m **Memory) *Memory {
	once.Do(func() {
		if *m == nil {
			*m = &Memory{}
		}
	})
	return *m
}
