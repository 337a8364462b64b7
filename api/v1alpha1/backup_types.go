package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupRepository is an S3-compatible bucket that holds a cluster's backups and archived WAL,
// written by pgBackRest. A cluster's own repository is <path>/<namespace>/<cluster name> in
// the bucket, so that clusters can share a bucket and never write into each other's.
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || !self.endpoint.startsWith('http')",message="backup repository endpoint is a host name with an optional :port, without http:// or https:// (pgBackRest always uses HTTPS)"
type BackupRepository struct {
	// Host name of the S3 server, with an optional port, e.g. s3.eu-west-1.amazonaws.com or
	// minio.storage.svc:9000. Always HTTPS. Use a DNS name: pgBackRest verifies the server's
	// certificate against it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]{1,5})?$`
	// +required
	Endpoint string `json:"endpoint"`

	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][-a-z0-9.]*[a-z0-9]$`
	// +required
	Bucket string `json:"bucket"`

	// Prefix inside the bucket; the cluster's repository is <path>/<namespace>/<cluster name>.
	// +kubebuilder:default="/pgpilot"
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^(/[-a-zA-Z0-9_.]+)*/?$`
	// +optional
	Path string `json:"path,omitempty"`

	// Region of the bucket.
	// +kubebuilder:default="us-east-1"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][-a-zA-Z0-9_.]*$`
	// +optional
	Region string `json:"region,omitempty"`

	// host addresses the bucket as <bucket>.<endpoint> (AWS); path as <endpoint>/<bucket>
	// (most self-hosted servers).
	// +kubebuilder:validation:Enum=host;path
	// +kubebuilder:default=host
	// +optional
	URIStyle string `json:"uriStyle,omitempty"`

	// A Secret in the cluster's namespace with the keys ACCESS_KEY_ID and ACCESS_SECRET_KEY.
	// +required
	CredentialsSecret corev1.LocalObjectReference `json:"credentialsSecret"`

	// A Secret in the cluster's namespace whose key ca.crt holds the CA certificates that
	// verify the S3 server; absent, the image's system roots do.
	// +optional
	CASecret *corev1.LocalObjectReference `json:"caSecret,omitempty"`
}

// Keys of the Secrets a BackupRepository names.
const (
	BackupAccessKeyIDKey     = "ACCESS_KEY_ID"
	BackupSecretAccessKeyKey = "ACCESS_SECRET_KEY"
	BackupCAKey              = "ca.crt"
)

// BackupType is what a backup copies: everything (full), what changed since the last full
// backup (diff) or since the last backup of any type (incr).
// +kubebuilder:validation:Enum=full;diff;incr
type BackupType string

// Backup types.
const (
	BackupFull BackupType = "full"
	BackupDiff BackupType = "diff"
	BackupIncr BackupType = "incr"
)

// BackupSpec asks for one backup of a cluster. Immutable.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a Backup's spec is immutable: create another Backup"
type BackupSpec struct {
	// The PostgresCluster in this namespace to back up; it needs spec.backup.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Cluster",xDescriptors={"urn:alm:descriptor:io.kubernetes:postgres.pgpilot.io:v1alpha1:PostgresCluster"},order=1
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// full, diff or incr. A diff or incr backup with no full backup in the repository is taken
	// as full by pgBackRest.
	// +kubebuilder:default=full
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup Type",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:full","urn:alm:descriptor:com.tectonic.ui:select:diff","urn:alm:descriptor:com.tectonic.ui:select:incr"},order=2
	Type BackupType `json:"type,omitempty"`
}

// BackupPhase is where a Backup is.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

// Backup phases.
const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupCompleted BackupPhase = "Completed"
	BackupFailed    BackupPhase = "Failed"
)

// BackupStatus is what pgBackRest reported about the backup.
type BackupStatus struct {
	// Pending, Running, Completed or Failed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors={"urn:alm:descriptor:io.kubernetes.phase"},order=1
	Phase BackupPhase `json:"phase,omitempty"`
	// The instance (pod) the backup was taken on.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Instance",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"},order=2
	Instance string `json:"instance,omitempty"`
	// When the backup started.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Started At",xDescriptors={"urn:alm:descriptor:text"},order=3
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// When the backup stopped (completed or failed).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Stopped At",xDescriptors={"urn:alm:descriptor:text"},order=4
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`
	// pgBackRest's label of the backup (a restore can name it).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup Label",xDescriptors={"urn:alm:descriptor:text"},order=5
	Label string `json:"label,omitempty"`
	// Size of the database in the backup, in bytes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Database Size (bytes)",xDescriptors={"urn:alm:descriptor:text"},order=6
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Size of the backup in the repository (compressed; for diff and incr, only what changed).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Repository Size (bytes)",xDescriptors={"urn:alm:descriptor:text"},order=7
	RepositorySizeBytes int64 `json:"repositorySizeBytes,omitempty"`
	// WAL position at the start of the backup.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Start LSN",xDescriptors={"urn:alm:descriptor:text"},order=8
	StartLSN string `json:"startLSN,omitempty"`
	// WAL position at the stop of the backup: a recovery target must be at or after it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Stop LSN",xDescriptors={"urn:alm:descriptor:text"},order=9
	StopLSN string `json:"stopLSN,omitempty"`
	// First WAL segment the backup needs to be consistent.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Start WAL",xDescriptors={"urn:alm:descriptor:text"},order=10
	StartWAL string `json:"startWAL,omitempty"`
	// Last WAL segment the backup needs to be consistent.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Stop WAL",xDescriptors={"urn:alm:descriptor:text"},order=11
	StopWAL string `json:"stopWAL,omitempty"`
	// Why the backup failed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Error",xDescriptors={"urn:alm:descriptor:text"},order=12
	Error string `json:"error,omitempty"`
}

// Backup is one on-demand backup of a PostgresCluster into its pgBackRest repository.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +operator-sdk:csv:customresourcedefinitions:displayName="PostgreSQL Backup",resources={{PostgresCluster,v1alpha1}}
// +kubebuilder:resource:categories=pgpilot
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Label",type=string,JSONPath=`.status.label`,priority=1
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.error`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Backup struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Which cluster and what kind of backup.
	// +required
	Spec BackupSpec `json:"spec"`
	// What happened, written by pgpilot.
	// +optional
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// The Backups.
	Items []Backup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Backup{}, &BackupList{})
}
