package controller

import (
	"crypto/tls"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A deleted cluster is forgotten everywhere at once, by the backup reconciler too, which shares
// the memory (before, its TLS configurations were never pruned).
func TestMemoryForgetsAClusterEverywhere(t *testing.T) {
	memory := &Memory{}
	clusters := &PostgresClusterReconciler{Memory: memory}
	backups := &BackupReconciler{Memory: memory}
	gone, kept := types.NamespacedName{Namespace: "ns", Name: "gone"}, types.NamespacedName{Namespace: "ns", Name: "kept"}
	backups.memory().agentTLS.byCluster = map[types.NamespacedName]agentTLSConfig{}
	for _, key := range []types.NamespacedName{gone, kept} {
		backups.memory().agentTLS.byCluster[key] = agentTLSConfig{config: &tls.Config{}}
		clusters.memory().unchanged.set(key, ensuredRecord{clusterVersion: "1"})
		clusters.memory().logNotices.announced(logNoticeKey{cluster: key, pod: "db-0", reason: "PostgreSQLPanic"}, 1)
	}

	clusters.memory().forget(gone)
	if _, ok := backups.memory().agentTLS.byCluster[gone]; ok {
		t.Error("the backup reconciler still holds the deleted cluster's TLS configuration")
	}
	if _, ok := clusters.memory().unchanged.get(gone); ok {
		t.Error("the deleted cluster's children are still remembered")
	}
	if !clusters.memory().logNotices.announced(logNoticeKey{cluster: gone, pod: "db-0", reason: "PostgreSQLPanic"}, 1) {
		t.Error("the deleted cluster's log notices are still remembered")
	}
	if _, ok := backups.memory().agentTLS.byCluster[kept]; !ok {
		t.Error("another cluster's TLS configuration was forgotten")
	}
	if _, ok := clusters.memory().unchanged.get(kept); !ok {
		t.Error("another cluster's children were forgotten")
	}
	if (&BackupReconciler{}).memory() == nil {
		t.Error("a reconciler without a given memory has none of its own")
	}
}
