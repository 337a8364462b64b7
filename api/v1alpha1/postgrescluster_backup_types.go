package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterBackupSpec turns on continuous WAL archiving into a pgBackRest repository and lets
// Backups be taken into it. Archiving cannot be turned off while a repository is set:
// pgBackRest restores a backup only with the WAL archived during it.
type ClusterBackupSpec struct {
	// Where backups and WAL go.
	// +required
	Repository BackupRepository `json:"repository"`

	// How many full backups to keep, with the differential and incremental backups and the
	// WAL that depend on them; pgBackRest expires older ones after each backup. Absent keeps
	// every backup.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// Compression of backups and archived WAL: none, gz, lz4 or zst.
	// +kubebuilder:validation:Enum=none;gz;lz4;zst
	// +kubebuilder:default=lz4
	// +optional
	Compression string `json:"compression,omitempty"`

	// Parallel processes of a backup, a restore and asynchronous WAL archiving.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=1
	// +optional
	Parallel int32 `json:"parallel,omitempty"`
}

// BackupRetention says which full backups are kept.
type BackupRetention struct {
	// Keep this many full backups (type count) or full backups for this many days (type time).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9999
	// +required
	Full int32 `json:"full"`

	// count or time (days).
	// +kubebuilder:validation:Enum=count;time
	// +kubebuilder:default=count
	// +optional
	FullType string `json:"fullType,omitempty"`
}

// RecoverySpec creates the cluster from another cluster's backups: a backup is restored and
// archived WAL replayed up to the target, then the cluster promotes onto a new timeline.
// +kubebuilder:validation:XValidation:rule="!has(self.target) || [has(self.target.time), has(self.target.lsn), has(self.target.xid), has(self.target.name), has(self.target.immediate)].filter(x, x).size() <= 1",message="bootstrap.recovery.target takes at most one of time, lsn, xid, name and immediate"
type RecoverySpec struct {
	// The repository holding the source cluster's backups.
	// +required
	Repository BackupRepository `json:"repository"`

	// Name of the source cluster: its repository is <path>/<namespace>/<clusterName>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	ClusterName string `json:"clusterName"`

	// Namespace of the source cluster; defaults to this cluster's.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Where WAL replay stops; absent replays all archived WAL.
	// +optional
	Target *RecoveryTarget `json:"target,omitempty"`
}

// RecoveryTarget is where a recovery stops replaying WAL.
// +kubebuilder:validation:XValidation:rule="!has(self.exclusive) || !self.exclusive || !has(self.immediate)",message="bootstrap.recovery.target.exclusive does not apply to immediate"
type RecoveryTarget struct {
	// A time with its zone offset (RFC 3339, fractions of a second allowed), e.g.
	// 2026-12-01T10:15:30.25Z.
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Time string `json:"time,omitempty"`
	// A WAL position, e.g. 0/3000060.
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	// +optional
	LSN string `json:"lsn,omitempty"`
	// A transaction ID.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,20}$`
	// +optional
	XID string `json:"xid,omitempty"`
	// A restore point created with pg_create_restore_point().
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`
	// Stop as soon as the backup is consistent.
	// +kubebuilder:validation:Enum=true
	// +optional
	Immediate *bool `json:"immediate,omitempty"`
	// Stop just before the target instead of just after it.
	// +optional
	Exclusive *bool `json:"exclusive,omitempty"`
}

// Condition types of a cluster with spec.backup.
const (
	// ConditionContinuousArchiving is True while the primary's WAL reaches the repository.
	ConditionContinuousArchiving = "ContinuousArchiving"
)

// ClusterBackupStatus is the state of the cluster's repository and WAL archiving.
type ClusterBackupStatus struct {
	// The earliest time the cluster can be recovered to: the end of its oldest backup.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`
	// The label of the latest completed backup in the repository.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// When the latest completed backup stopped.
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`
	// The backups in the repository.
	// +optional
	Backups int32 `json:"backups,omitempty"`
	// The last WAL segment archived.
	// +optional
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`
	// When the last WAL segment was archived.
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	// The last WAL segment that failed to archive.
	// +optional
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`
	// When a WAL segment last failed to archive.
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`
	// Failed archive attempts since the primary started.
	// +optional
	ArchiveFailures int64 `json:"archiveFailures,omitempty"`
	// Bytes in the primary's pg_wal, which grows while archiving fails.
	// +optional
	WALBytes int64 `json:"walBytes,omitempty"`
	// Free bytes left on the primary's data volume, which pg_wal fills while archiving fails.
	// +optional
	VolumeFreeBytes int64 `json:"volumeFreeBytes,omitempty"`
}
