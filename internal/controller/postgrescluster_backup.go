package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Reasons of the ContinuousArchiving condition.
const (
	reasonArchiving           = "Archiving"
	reasonBackupSecretInvalid = "BackupSecretInvalid"
	reasonBackupUnavailable   = "BackupUnavailable"
	reasonArchivingNotEnabled = "ArchivingNotEnabled"
	reasonRepositoryMismatch  = "RepositoryBelongsToAnotherDatabase"
	reasonStanzaFailed        = "RepositoryUnreachable"
	reasonStanzaPending       = "StanzaPending"
	reasonArchiveFailing      = "ArchiveFailing"
	reasonWaitingForPrimary   = "WaitingForPrimary"
)

// checkBackupSecrets looks at the Secrets spec.backup and spec.bootstrap.recovery name. A
// wrong one never stops the reconcile (failover must go on without backups); the instances
// project them as optional, and ContinuousArchiving says what is missing.
func (r *PostgresClusterReconciler) checkBackupSecrets(ctx context.Context, s *scope) (*stop, error) {
	var repos []struct {
		field string
		repo  pgv1.BackupRepository
	}
	if b := s.cluster.Spec.Backup; b != nil {
		repos = append(repos, struct {
			field string
			repo  pgv1.BackupRepository
		}{"spec.backup.repository", b.Repository})
	}
	if rec := s.cluster.Spec.Bootstrap.Recovery; rec != nil && s.cluster.Status.CurrentPrimary == "" {
		repos = append(repos, struct {
			field string
			repo  pgv1.BackupRepository
		}{"spec.bootstrap.recovery.repository", rec.Repository})
	}
	for _, r2 := range repos {
		problem, err := r.secretProblem(ctx, s.cluster.Namespace, r2.field+".credentialsSecret", r2.repo.CredentialsSecret.Name,
			pgv1.BackupAccessKeyIDKey, pgv1.BackupSecretAccessKeyKey)
		if err == nil && problem == "" && r2.repo.CASecret != nil {
			problem, err = r.secretProblem(ctx, s.cluster.Namespace, r2.field+".caSecret", r2.repo.CASecret.Name, pgv1.BackupCAKey)
		}
		if err != nil {
			return nil, err
		}
		if problem != "" {
			s.backupProblem = &reasonMessage{reasonBackupSecretInvalid, problem}
			return nil, nil
		}
	}
	return nil, nil
}

// secretProblem says what is wrong with the user's Secret name (outside the cache, so read
// from the API server) for field, "" when it has every key.
func (r *PostgresClusterReconciler) secretProblem(ctx context.Context, namespace, field, name string, keys ...string) (string, error) {
	secret := &corev1.Secret{}
	return r.keysProblem(ctx, namespace, field, "Secret", name, secret, func(key string) bool { return len(secret.Data[key]) > 0 }, keys)
}

// configMapProblem is secretProblem for a user's ConfigMap.
func (r *PostgresClusterReconciler) configMapProblem(ctx context.Context, namespace, field, name string, keys ...string) (string, error) {
	cm := &corev1.ConfigMap{}
	return r.keysProblem(ctx, namespace, field, "ConfigMap", name, cm,
		func(key string) bool { return cm.Data[key] != "" || len(cm.BinaryData[key]) > 0 }, keys)
}

func (r *PostgresClusterReconciler) keysProblem(ctx context.Context, namespace, field, kind, name string, obj client.Object,
	has func(key string) bool, keys []string) (string, error) {
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s: %s %q does not exist", field, kind, name), nil
	}
	if err != nil {
		return "", fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	for _, key := range keys {
		if !has(key) {
			return fmt.Sprintf("%s: %s %q has no %q key, or it is empty", field, kind, name, key), nil
		}
	}
	return "", nil
}

// archivingCondition is ContinuousArchiving from the primary's report; ok is false when there
// is nothing new to say (no report: the condition keeps what it said).
func archivingCondition(a *agentapi.ArchiveStatus, problem *reasonMessage, generation int64) (metav1.Condition, bool) {
	c := metav1.Condition{Type: pgv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	switch {
	case problem != nil:
		c.Reason, c.Message = problem.reason, problem.message
	case a == nil:
		return c, false
	case a.Unavailable != "":
		c.Reason, c.Message = reasonBackupUnavailable, a.Unavailable
	case !a.Enabled:
		c.Reason, c.Message = reasonArchivingNotEnabled, "archive_mode is not on yet: the primary applies it when it restarts"
	case strings.Contains(a.StanzaError, "do not match the database"):
		c.Reason = reasonRepositoryMismatch
		c.Message = "the repository holds another database system's backups (pgBackRest: " + errorLine(a.StanzaError) +
			"); give this cluster an empty repository path: pgpilot never writes into it"
	case a.Failing():
		// Before a failed stanza refresh: in an outage both fail, and WAL piling up in pg_wal
		// is what the user must know.
		c.Reason = reasonArchiveFailing
		c.Message = fmt.Sprintf("WAL segment %s failed to archive at %s (%d failures); pg_wal holds %s, %s free on the volume",
			a.LastFailedWAL, a.LastFailedTime.UTC().Format(time.RFC3339), a.FailedCount, bytesOf(a.WALBytes), bytesOf(a.VolumeFreeBytes))
	case a.StanzaError != "":
		c.Reason, c.Message = reasonStanzaFailed, "cannot create or read the repository's stanza: "+errorLine(a.StanzaError)
	case !a.StanzaReady:
		c.Reason, c.Message = reasonStanzaPending, "the primary is creating the repository's stanza"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, reasonArchiving
		c.Message = "WAL is archived to the repository"
		if a.LastArchivedWAL != "" {
			c.Message = fmt.Sprintf("last archived %s at %s", a.LastArchivedWAL, a.LastArchivedTime.UTC().Format(time.RFC3339))
		}
	}
	return c, true
}

// setArchiving writes ContinuousArchiving and status.backup; a cluster without spec.backup
// has neither.
func setArchiving(status *pgv1.PostgresClusterStatus, o summary) {
	if !o.backupConfigured {
		meta.RemoveStatusCondition(&status.Conditions, pgv1.ConditionContinuousArchiving)
		status.Backup = nil
		return
	}
	if c, ok := archivingCondition(o.archive, o.backupProblem, o.generation); ok {
		meta.SetStatusCondition(&status.Conditions, c)
	} else if meta.FindStatusCondition(status.Conditions, pgv1.ConditionContinuousArchiving) == nil {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: pgv1.ConditionContinuousArchiving,
			Status: metav1.ConditionUnknown, Reason: reasonWaitingForPrimary, Message: "no primary has reported on archiving yet",
			ObservedGeneration: o.generation})
	}
	if o.archive != nil {
		status.Backup = backupStatus(o.archive)
	}
}

// archivingDegraded is why the cluster is Degraded because of archiving: WAL is not reaching
// the repository, so pg_wal grows and point-in-time recovery stops at the last archived segment.
func archivingDegraded(status *pgv1.PostgresClusterStatus) *metav1.Condition {
	c := meta.FindStatusCondition(status.Conditions, pgv1.ConditionContinuousArchiving)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason == reasonStanzaPending || c.Reason == reasonArchivingNotEnabled {
		return nil
	}
	return c
}

func backupStatus(a *agentapi.ArchiveStatus) *pgv1.ClusterBackupStatus {
	b := &pgv1.ClusterBackupStatus{
		LastArchivedWAL: a.LastArchivedWAL, LastArchivedTime: metaTime(a.LastArchivedTime),
		LastFailedWAL: a.LastFailedWAL, LastFailedTime: metaTime(a.LastFailedTime), ArchiveFailures: a.FailedCount,
		WALBytes: a.WALBytes, VolumeFreeBytes: a.VolumeFreeBytes, Backups: int32(len(a.Backups)),
	}
	if n := len(a.Backups); n > 0 {
		first := metav1.NewTime(time.Unix(a.Backups[0].Stop, 0).UTC())
		last := metav1.NewTime(time.Unix(a.Backups[n-1].Stop, 0).UTC())
		b.FirstRecoverabilityPoint, b.LastBackup, b.LastBackupTime = &first, a.Backups[n-1].Label, &last
	}
	return b
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &m
}

// errorLine is pgBackRest's ERROR line in its output, or the output's last line.
func errorLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if _, after, ok := strings.Cut(l, "ERROR: "); ok {
			return strings.TrimSpace(after)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

func bytesOf(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
