package backup

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// fakeBackupAgents keeps backups by agent address as an agent would; results says how each
// ends once asked.
type fakeBackupAgents struct {
	mu      sync.Mutex
	started map[string][]agentapi.BackupRequest
	results map[string]*agentapi.BackupResult
	busy    bool
}

func (f *fakeBackupAgents) StartBackup(_ context.Context, e agentapi.Endpoint, req agentapi.BackupRequest) (*agentapi.BackupResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy {
		return nil, agentapi.ErrBackupBusy
	}
	f.started[e.Address] = append(f.started[e.Address], req)
	f.results[req.Name] = &agentapi.BackupResult{Name: req.Name, Phase: agentapi.BackupRunning, StartedAt: "2026-12-01T10:00:00Z"}
	return f.results[req.Name], nil
}

func (f *fakeBackupAgents) BackupResult(_ context.Context, _ agentapi.Endpoint, name string) (*agentapi.BackupResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.results[name]; ok {
		return r, nil
	}
	return nil, agentapi.ErrUnknownBackup
}

func backupFixture(t *testing.T, archiving metav1.ConditionStatus, withBackup bool) (*BackupReconciler, *fakeBackupAgents, client.Client) {
	t.Helper()
	withTypes(t)
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary = "db-0"
	if withBackup {
		cluster.Spec.Backup = &pgv1.ClusterBackupSpec{}
	}
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: pgv1.ConditionContinuousArchiving, Status: archiving, Reason: "X"})
	agentSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.AgentSecretName(cluster), Namespace: "ns"},
		Data: map[string][]byte{corev1.BasicAuthPasswordKey: []byte("token")}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns"}}
	backup := &pgv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "0123456789"},
		Spec: pgv1.BackupSpec{Cluster: corev1.LocalObjectReference{Name: "db"}, Type: pgv1.BackupIncr}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, agentSecret, pod, backup).
		WithStatusSubresource(&pgv1.Backup{}).Build()
	agents := &fakeBackupAgents{started: map[string][]agentapi.BackupRequest{}, results: map[string]*agentapi.BackupResult{}}
	return &BackupReconciler{Client: c, Agents: agents, AgentAddress: func(p *corev1.Pod) string { return p.Name }}, agents, c
}

func reconcileBackup(t *testing.T, r *BackupReconciler, c client.Client) (*pgv1.Backup, reconcile.Result) {
	t.Helper()
	result, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	b := &pgv1.Backup{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nightly"}, b); err != nil {
		t.Fatal(err)
	}
	return b, result
}

// A Backup starts once on the primary, is followed until the agent reports it done, and keeps
// pgBackRest's record.
func TestBackupRunsOnThePrimaryAndRecordsTheResult(t *testing.T) {
	r, agents, c := backupFixture(t, metav1.ConditionTrue, true)
	b, result := reconcileBackup(t, r, c)
	if b.Status.Phase != pgv1.BackupRunning || b.Status.Instance != "db-0" || result.RequeueAfter == 0 {
		t.Fatalf("after the first reconcile: %+v (%+v)", b.Status, result)
	}
	if got := agents.started["db-0"]; len(got) != 1 || got[0].Type != "incr" || got[0].Name != "nightly-01234567" {
		t.Fatalf("started %+v", agents.started)
	}
	if b, _ = reconcileBackup(t, r, c); b.Status.Phase != pgv1.BackupRunning || len(agents.started["db-0"]) != 1 {
		t.Fatalf("a running backup is followed, not started again: %+v %+v", b.Status, agents.started)
	}
	agents.results["nightly-01234567"] = &agentapi.BackupResult{Phase: agentapi.BackupCompleted, StoppedAt: "2026-12-01T10:02:00Z",
		Backup: &agentapi.BackupRecord{Label: "20261201-100000F_20261201-100100I", Start: 1764583260, Stop: 1764583320,
			StartLSN: "0/5000028", StopLSN: "0/5000138", StartWAL: "000000010000000000000005", StopWAL: "000000010000000000000005", Size: 30 << 20}}
	b, result = reconcileBackup(t, r, c)
	if b.Status.Phase != pgv1.BackupCompleted || b.Status.Label != "20261201-100000F_20261201-100100I" || b.Status.StopLSN != "0/5000138" ||
		b.Status.SizeBytes != 30<<20 || b.Status.StoppedAt.Unix() != 1764583320 || !result.IsZero() {
		t.Fatalf("completed: %+v (%+v)", b.Status, result)
	}
}

func TestBackupWaitsOrFails(t *testing.T) {
	t.Run("waits while the cluster does not archive", func(t *testing.T) {
		r, agents, c := backupFixture(t, metav1.ConditionFalse, true)
		b, result := reconcileBackup(t, r, c)
		if b.Status.Phase != pgv1.BackupPending || !strings.Contains(b.Status.Error, "ContinuousArchiving") || result.RequeueAfter == 0 || len(agents.started) != 0 {
			t.Fatalf("%+v %+v", b.Status, result)
		}
	})
	t.Run("waits while another backup runs", func(t *testing.T) {
		r, agents, c := backupFixture(t, metav1.ConditionTrue, true)
		agents.busy = true
		if b, _ := reconcileBackup(t, r, c); b.Status.Phase != pgv1.BackupPending || !strings.Contains(b.Status.Error, "another backup") {
			t.Fatalf("%+v", b.Status)
		}
	})
	t.Run("fails for a cluster without a repository", func(t *testing.T) {
		r, _, c := backupFixture(t, metav1.ConditionTrue, false)
		if b, _ := reconcileBackup(t, r, c); b.Status.Phase != pgv1.BackupFailed || !strings.Contains(b.Status.Error, "no spec.backup") {
			t.Fatalf("%+v", b.Status)
		}
	})
	t.Run("fails when the agent forgot it (restarted)", func(t *testing.T) {
		r, agents, c := backupFixture(t, metav1.ConditionTrue, true)
		reconcileBackup(t, r, c)
		delete(agents.results, "nightly-01234567")
		if b, _ := reconcileBackup(t, r, c); b.Status.Phase != pgv1.BackupFailed || !strings.Contains(b.Status.Error, "restarted") {
			t.Fatalf("%+v", b.Status)
		}
	})
	t.Run("fails with pgBackRest's error", func(t *testing.T) {
		r, agents, c := backupFixture(t, metav1.ConditionTrue, true)
		reconcileBackup(t, r, c)
		agents.results["nightly-01234567"] = &agentapi.BackupResult{Phase: agentapi.BackupFailed, Error: "pgbackrest backup: exit status 82: WAL segment was not archived"}
		b, result := reconcileBackup(t, r, c)
		if b.Status.Phase != pgv1.BackupFailed || !strings.Contains(b.Status.Error, "not archived") || b.Status.StoppedAt == nil || !result.IsZero() {
			t.Fatalf("%+v", b.Status)
		}
		if b, _ = reconcileBackup(t, r, c); b.Status.Phase != pgv1.BackupFailed {
			t.Fatalf("a failed Backup stays failed: %+v", b.Status)
		}
	})
}
