package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Memory is what the operator process remembers of each cluster between reconciles. None of it
// is needed after a restart: the agents' TLS client configurations (shared by the cluster and
// backup reconcilers) are made again from the CA Secret, the record of children found up to
// date only saves work, the log notices announced only spare repeated Events. The primary
// Leases' tracker, keyed by the cluster's UID, has its own lifecycle (postgrescluster_lease.go).
// forget clears a cluster from all of it, in one place.
type Memory struct {
	agentTLS   agentTLSConfigs
	unchanged  unchangedChildren
	logNotices logNoticesSeen
}

func (m *Memory) forget(cluster types.NamespacedName) {
	m.agentTLS.forget(cluster)
	m.unchanged.forget(cluster)
	m.logNotices.forget(cluster)
}

func (r *PostgresClusterReconciler) memory() *Memory { return givenOrOwn(&r.memoryOnce, &r.Memory) }

func (r *BackupReconciler) memory() *Memory { return givenOrOwn(&r.memoryOnce, &r.Memory) }

// givenOrOwn is the Memory a reconciler was given, or one of its own.
func givenOrOwn(once *sync.Once, m **Memory) *Memory {
	once.Do(func() {
		if *m == nil {
			*m = &Memory{}
		}
	})
	return *m
}
