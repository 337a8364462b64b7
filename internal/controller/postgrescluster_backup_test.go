package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestArchivingCondition(t *testing.T) {
	at := func(s string) *time.Time {
		v, _ := time.Parse(time.RFC3339, s)
		return &v
	}
	healthy := agentapi.ArchiveStatus{Enabled: true, StanzaReady: true, LastArchivedWAL: "000000010000000000000007",
		LastArchivedTime: at("2026-12-01T10:00:05Z"), LastFailedWAL: "000000010000000000000006", LastFailedTime: at("2026-12-01T10:00:00Z")}
	failing := healthy
	failing.LastFailedWAL, failing.LastFailedTime, failing.FailedCount = "000000010000000000000008", at("2026-12-01T10:01:00Z"), 3
	failing.WALBytes, failing.VolumeFreeBytes = 48<<20, 900<<20
	with := func(edit func(*agentapi.ArchiveStatus)) *agentapi.ArchiveStatus {
		a := healthy
		edit(&a)
		return &a
	}
	tests := []struct {
		name         string
		archive      *agentapi.ArchiveStatus
		problem      *reasonMessage
		wantOK       bool
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantMessage  string
		wantDegraded bool
	}{
		{"no report keeps what the condition said", nil, nil, false, "", "", "", false},
		{"archiving after an old failure", &healthy, nil, true, metav1.ConditionTrue, reasonArchiving,
			"last archived 000000010000000000000007 at 2026-12-01T10:00:05Z", false},
		{"the last attempt failed: the reason, the segment, pg_wal's growth and the free space", &failing, nil, true,
			metav1.ConditionFalse, reasonArchiveFailing, "WAL segment 000000010000000000000008 failed to archive at 2026-12-01T10:01:00Z (3 failures); pg_wal holds 48.0 MiB, 900.0 MiB free on the volume", true},
		{"a Secret problem wins over the report", &healthy, &reasonMessage{reasonBackupSecretInvalid, `spec.backup.repository.credentialsSecret: Secret "s3" does not exist`},
			true, metav1.ConditionFalse, reasonBackupSecretInvalid, `Secret "s3" does not exist`, true},
		{"no pgbackrest in the image", with(func(a *agentapi.ArchiveStatus) { a.Unavailable = "pgbackrest is not in this PostgreSQL image" }), nil, true,
			metav1.ConditionFalse, reasonBackupUnavailable, "pgbackrest is not in this PostgreSQL image", true},
		{"archive_mode waits for a restart", with(func(a *agentapi.ArchiveStatus) { a.Enabled = false }), nil, true,
			metav1.ConditionFalse, reasonArchivingNotEnabled, "restarts", false},
		{"another database's repository", with(func(a *agentapi.ArchiveStatus) {
			a.StanzaReady, a.StanzaError = false, "pgbackrest stanza-create: exit status 28: INFO: stanza-create command begin\nERROR: [028]: backup and archive info files exist but do not match the database\n       HINT: is this the correct stanza?"
		}), nil, true, metav1.ConditionFalse, reasonRepositoryMismatch, "[028]: backup and archive info files exist but do not match the database", true},
		{"an unreachable repository", with(func(a *agentapi.ArchiveStatus) {
			a.StanzaReady, a.StanzaError = false, "pgbackrest stanza-create: exit status 49\nERROR: [049]: unable to get address for 's3.example': [-2] Name or service not known"
		}), nil, true, metav1.ConditionFalse, reasonStanzaFailed, "unable to get address", true},
		{"an outage: archiving failing wins over the failed refresh of the repository's info", with(func(a *agentapi.ArchiveStatus) {
			*a = failing
			a.StanzaReady, a.StanzaError = false, "pgbackrest info: exit status 49\nERROR: [049]: unable to connect to 's3.example:443'"
		}), nil, true, metav1.ConditionFalse, reasonArchiveFailing, "WAL segment 000000010000000000000008 failed to archive", true},
		{"the stanza is being created", with(func(a *agentapi.ArchiveStatus) { a.StanzaReady = false }), nil, true,
			metav1.ConditionFalse, reasonStanzaPending, "creating", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := archivingCondition(tt.archive, tt.problem, 7)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if c.Status != tt.wantStatus || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMessage) || c.ObservedGeneration != 7 {
				t.Errorf("condition %+v, want %s %s containing %q", c, tt.wantStatus, tt.wantReason, tt.wantMessage)
			}
			status := &pgv1.PostgresClusterStatus{}
			meta.SetStatusCondition(&status.Conditions, c)
			if got := archivingDegraded(status) != nil; got != tt.wantDegraded {
				t.Errorf("degraded = %v, want %v", got, tt.wantDegraded)
			}
		})
	}
}

// A cluster whose archiving fails is Degraded with the reason; without spec.backup it has no
// archiving condition or status at all.
func TestComputeStatusReportsArchiving(t *testing.T) {
	ready := health{desired: 1, instances: 1, readyInstances: 1, primary: "db-0", primaryReady: true, primaryWritable: true}
	failed := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	archive := &agentapi.ArchiveStatus{Enabled: true, StanzaReady: true, LastFailedWAL: "000000010000000000000008", LastFailedTime: &failed,
		FailedCount: 2, Backups: []agentapi.BackupRecord{{Label: "20261201-100000F", Stop: 1764583260}, {Label: "20261201-100500F_20261201-100600I", Stop: 1764583560}}}
	status := &pgv1.PostgresClusterStatus{}
	computeStatus(status, summary{health: ready, generation: 1, backupConfigured: true, archive: archive})
	degraded := meta.FindStatusCondition(status.Conditions, pgv1.ConditionDegraded)
	if degraded == nil || degraded.Status != metav1.ConditionTrue || degraded.Reason != reasonArchiveFailing {
		t.Errorf("Degraded %+v, want True ArchiveFailing", degraded)
	}
	if status.Phase != pgv1.PhaseReady {
		t.Errorf("phase %s: the database still serves, it is Ready (and Degraded)", status.Phase)
	}
	b := status.Backup
	if b == nil || b.Backups != 2 || b.LastBackup != "20261201-100500F_20261201-100600I" || b.FirstRecoverabilityPoint.Unix() != 1764583260 ||
		b.LastFailedWAL != "000000010000000000000008" || b.ArchiveFailures != 2 {
		t.Errorf("status.backup %+v", b)
	}

	computeStatus(status, summary{health: ready, generation: 2})
	if meta.FindStatusCondition(status.Conditions, pgv1.ConditionContinuousArchiving) != nil || status.Backup != nil {
		t.Errorf("spec.backup removed, yet status keeps %+v %+v", status.Conditions, status.Backup)
	}
	if c := meta.FindStatusCondition(status.Conditions, pgv1.ConditionDegraded); c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v after spec.backup was removed", c)
	}
}
