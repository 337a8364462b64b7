package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScheduledBackupSpec takes Backups of a cluster on a cron schedule.
type ScheduledBackupSpec struct {
	// The PostgresCluster in this namespace to back up; it needs spec.backup.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Cluster",xDescriptors={"urn:alm:descriptor:io.kubernetes:postgres.pgpilot.io:v1alpha1:PostgresCluster"},order=1
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// When to take a backup: five cron fields in UTC (minute hour day-of-month month
	// day-of-week, e.g. "0 3 * * *"), or @hourly, @daily, @weekly, @monthly, "@every 6h".
	// A time missed while the operator was down is caught up once, not once per miss.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schedule",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	Schedule string `json:"schedule"`

	// full, diff or incr.
	// +kubebuilder:default=full
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup Type",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:full","urn:alm:descriptor:com.tectonic.ui:select:diff","urn:alm:descriptor:com.tectonic.ui:select:incr"},order=3
	Type BackupType `json:"type,omitempty"`

	// Take no backups until this is false again.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Suspend",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"},order=4
	Suspend bool `json:"suspend,omitempty"`

	// Take the first backup at once, not at the first scheduled time.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Immediate",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"},order=5
	Immediate bool `json:"immediate,omitempty"`

	// How many finished Backup objects of this schedule to keep; older ones are deleted (the
	// backups in the repository are kept or expired by spec.backup.retention of the cluster).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=5
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backups History Limit",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"},order=6
	BackupsHistoryLimit int32 `json:"backupsHistoryLimit,omitempty"`
}

// ScheduledBackupStatus is when the schedule last fired and fires next.
type ScheduledBackupStatus struct {
	// Scheduled: True while backups are taken on schedule; False with the reason (an invalid
	// schedule, suspended).
	// +listType=map
	// +listMapKey=type
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=1
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// The scheduled time of the last Backup created.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Schedule Time",xDescriptors={"urn:alm:descriptor:text"},order=2
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// When the next Backup will be created.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Next Schedule Time",xDescriptors={"urn:alm:descriptor:text"},order=3
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// The name of the last Backup created.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Backup",xDescriptors={"urn:alm:descriptor:text"},order=4
	LastBackup string `json:"lastBackup,omitempty"`
}

// ConditionScheduled is True while a ScheduledBackup takes backups on its schedule.
const ConditionScheduled = "Scheduled"

// ScheduledBackupLabel is on each Backup a ScheduledBackup created, with its name.
const ScheduledBackupLabel = "postgres.pgpilot.io/scheduled-backup"

// ScheduledBackup creates Backups of a PostgresCluster on a cron schedule and keeps a bounded
// history of them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +operator-sdk:csv:customresourcedefinitions:displayName="PostgreSQL Scheduled Backup",resources={{Backup,v1alpha1}}
// +kubebuilder:resource:categories=pgpilot
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last Backup",type=string,JSONPath=`.status.lastBackup`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ScheduledBackup struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// The schedule, the cluster and the kind of backup.
	// +required
	Spec ScheduledBackupSpec `json:"spec"`
	// When it fired, written by pgpilot.
	// +optional
	Status ScheduledBackupStatus `json:"status,omitempty"`
}

// ScheduledBackupList is a list of ScheduledBackups.
// +kubebuilder:object:root=true
type ScheduledBackupList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// The ScheduledBackups.
	Items []ScheduledBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ScheduledBackup{}, &ScheduledBackupList{})
}
