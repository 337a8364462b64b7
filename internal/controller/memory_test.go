package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// A deleted cluster is forgotten everywhere at once, by the backup reconcilers too, which share
// the agents' TLS configurations (before, theirs were never pruned).
func TestMemoryForgetsAClusterEverywhere(t *testing.T) {
	memory := &Memory{}
	clusters := &PostgresClusterReconciler{Memory: memory}
	gone, kept := types.NamespacedName{Namespace: "ns", Name: "gone"}, types.NamespacedName{Namespace: "ns", Name: "kept"}
	for _, key := range []types.NamespacedName{gone, kept} {
		cluster := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		if _, err := memory.AgentTLS().ForCluster(cluster, caSecret(t, cluster)); err != nil {
			t.Fatal(err)
		}
		clusters.memory().unchanged.set(key, ensuredRecord{clusterVersion: "1"})
		clusters.memory().logNotices.announced(logNoticeKey{cluster: key, pod: "db-0", reason: "PostgreSQLPanic"}, 1)
	}

	clusters.memory().forget(gone)
	if memory.AgentTLS().Holds(gone) {
		t.Error("the backup reconcilers still hold the deleted cluster's TLS configuration")
	}
	if _, ok := clusters.memory().unchanged.get(gone); ok {
		t.Error("the deleted cluster's children are still remembered")
	}
	if !clusters.memory().logNotices.announced(logNoticeKey{cluster: gone, pod: "db-0", reason: "PostgreSQLPanic"}, 1) {
		t.Error("the deleted cluster's log notices are still remembered")
	}
	if !memory.AgentTLS().Holds(kept) {
		t.Error("another cluster's TLS configuration was forgotten")
	}
	if _, ok := clusters.memory().unchanged.get(kept); !ok {
		t.Error("another cluster's children were forgotten")
	}
}

// caSecret is a CA Secret for c as the certificates stage makes it: the CA and the operator's
// client certificate.
func caSecret(t *testing.T, c *pgv1.PostgresCluster) *corev1.Secret {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewAuthority("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	operator, _, err := issueClient(c, ca, "pgpilot-operator", now)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.CASecretName(c), Namespace: c.Namespace, UID: "ca", ResourceVersion: "1"},
		Data: map[string][]byte{agentapi.TLSCAFile: ca.CertPEM, pgbuilder.OperatorCertKey: operator.CertPEM, pgbuilder.OperatorKeyKey: operator.KeyPEM}}
}
