package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PostgresClusterSpec is the desired state of a highly available PostgreSQL cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.bootstrap.initdb.owner) || self.roles.all(r, r.name != self.bootstrap.initdb.owner && (!has(r.inRoles) || !(self.bootstrap.initdb.owner in r.inRoles)))",message="spec.roles cannot name the application owner (bootstrap.initdb.owner), nor make a role its member: its password is the bootstrap Secret's"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || self.roles.filter(r, has(r.passwordSecret)).size() <= 8",message="at most 8 of spec.roles may name a passwordSecret: pgpilot's admission policy checks that whoever names a Secret may read it"
// +kubebuilder:validation:XValidation:rule="self.bootstrap == oldSelf.bootstrap",message="spec.bootstrap is immutable: the cluster has already been initialised from it"
// +kubebuilder:validation:XValidation:rule="!has(self.postgresql) || !has(self.postgresql.synchronous) || !has(self.postgresql.synchronous.number) || self.postgresql.synchronous.number < (has(self.instances) ? self.instances : 3)",message="postgresql.synchronous.number must be smaller than instances: only the standbys can confirm commits"
type PostgresClusterSpec struct {
	// Number of PostgreSQL instances: one primary plus instances-1 streaming replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +kubebuilder:default=3
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Instances",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"},order=1
	Instances int32 `json:"instances,omitempty"`

	// PostgreSQL major version: 15, 17 or 18. pgpilot runs its own image of that major (the
	// operator's RELATED_IMAGE_POSTGRES_<major>) unless spec.image names another. Unset, a new
	// cluster gets 17 (status.postgresMajor records it) and a cluster created before pgpilot
	// 0.4.0 keeps 15, the only major earlier releases ran. Raising it upgrades the running
	// cluster in place (status.majorUpgrade): checked first, then pg_upgrade on a replica that
	// replayed all of the cleanly stopped primary. It cannot be lowered, except back to the
	// data's major (status.postgresMajor) before the upgrade's point of no return, which cancels
	// it.
	// +kubebuilder:validation:Enum=15;17;18
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Version",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:15","urn:alm:descriptor:com.tectonic.ui:select:17","urn:alm:descriptor:com.tectonic.ui:select:18"},order=1
	PostgresVersion int32 `json:"postgresVersion,omitempty"`

	// Container image with the PostgreSQL server binaries of spec.postgresVersion. Defaults to
	// pgpilot's image of that major (the operator's RELATED_IMAGE_POSTGRES_<major>). An image
	// of another major is refused: the cluster is Degraded with both versions named.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Image",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text","urn:alm:descriptor:com.tectonic.ui:advanced"},order=6
	Image string `json:"image,omitempty"`

	// Persistent storage for each instance's data directory.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage",order=2
	Storage StorageSpec `json:"storage"`

	// Compute resources of the PostgreSQL container of every instance.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"},order=3
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// PostgreSQL server configuration.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Configuration",order=4
	PostgreSQL PostgreSQLSpec `json:"postgresql,omitempty"`

	// How the cluster's first instance is initialised. Immutable.
	// +kubebuilder:default={initdb:{}}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Bootstrap",order=5
	Bootstrap BootstrapSpec `json:"bootstrap,omitempty"`

	// Where the instances' pods may be scheduled.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Scheduling",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=7
	Scheduling SchedulingSpec `json:"scheduling,omitempty"`

	// How long the primary must stay failed (PostgreSQL down, pod not ready or gone, agent
	// unreachable, fenced) before pgpilot fails over to the replica holding the most WAL.
	// 0s fails over at once; a longer delay lets a primary that restarts quickly stay the
	// primary, at the cost of a longer outage when it does not.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="failoverDelay must be between 0s and 1h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Failover Delay",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=6
	FailoverDelay *metav1.Duration `json:"failoverDelay,omitempty"`

	// How the primary's pod is replaced when its template changes (a new image, a new agent),
	// after every replica's: switchover moves the primary to an updated replica first (a few
	// seconds without writes); restart replaces the primary's pod where it is, holding failover
	// back while it comes back (longer without writes, no change of primary).
	// +kubebuilder:validation:Enum=switchover;restart
	// +kubebuilder:default=switchover
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Primary Update Method",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:switchover","urn:alm:descriptor:com.tectonic.ui:select:restart"},order=8
	PrimaryUpdateMethod PrimaryUpdateMethod `json:"primaryUpdateMethod,omitempty"`

	// How a major upgrade treats the data directory: link (the default) hard-links the relation
	// files into the new major's directory, so the outage does not grow with the data, and the
	// old major's directory cannot be started once the new server has; copy copies them, which
	// takes as long as the data is big and twice its space, and keeps the old directory intact.
	// +kubebuilder:validation:Enum=link;copy
	// +kubebuilder:default=link
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Major Upgrade Mode",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:link","urn:alm:descriptor:com.tectonic.ui:select:copy","urn:alm:descriptor:com.tectonic.ui:advanced"},order=9
	MajorUpgradeMode MajorUpgradeMode `json:"majorUpgradeMode,omitempty"`

	// Continuous WAL archiving and backups into an S3-compatible pgBackRest repository.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup",order=9
	Backup *ClusterBackupSpec `json:"backup,omitempty"`

	// How the instances' metrics are collected.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Monitoring",order=10
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// A NetworkPolicy that admits to the instances only the traffic pgpilot and the clients
	// need; off unless enabled.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Network Policy",order=13
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// The TLS certificates of client, replication and operator connections.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Certificates",order=11
	Certificates CertificatesSpec `json:"certificates,omitempty"`

	// Lets the superuser (postgres) log in over the network with its password, from outside the
	// instance pods. Unset, it is off for a cluster created by pgpilot 0.4.0 or later and on for
	// one created before (status.legacySuperuserAccess), so that an upgrade locks no client
	// out. In-pod clients (the agents, kubectl pgpilot psql) reach it over the pod's socket or
	// loopback either way; replication and pg_rewind use streaming_replica.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Superuser Network Access",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch","urn:alm:descriptor:com.tectonic.ui:advanced"},order=12
	EnableSuperuserAccess *bool `json:"enableSuperuserAccess,omitempty"`

	// PostgreSQL roles pgpilot keeps as declared on the primary: created, changed, dropped when
	// their ensure is absent, and put back when changed by hand (status.roles says how each one
	// stands). pgpilot never removes a password unless disablePassword says so.
	// +kubebuilder:validation:MaxItems=500
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Roles",order=14
	Roles []ManagedRoleSpec `json:"roles,omitempty"`
}

// MajorUpgradeMode is how pg_upgrade carries the relation files to the new major.
type MajorUpgradeMode string

// Major upgrade modes.
const (
	MajorUpgradeLink MajorUpgradeMode = "link"
	MajorUpgradeCopy MajorUpgradeMode = "copy"
)

// PrimaryUpdateMethod is how the primary's outdated pod is replaced.
type PrimaryUpdateMethod string

// Primary update methods.
const (
	PrimaryUpdateSwitchover PrimaryUpdateMethod = "switchover"
	PrimaryUpdateRestart    PrimaryUpdateMethod = "restart"
)

// PVCReclaimPolicy says what happens to the instances' volume claims when the cluster is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type PVCReclaimPolicy string

const (
	// PVCReclaimRetain keeps the claims (and the data) after the cluster is deleted.
	PVCReclaimRetain PVCReclaimPolicy = "Retain"
	// PVCReclaimDelete deletes the claims together with the cluster.
	PVCReclaimDelete PVCReclaimPolicy = "Delete"
)

// StorageSpec describes the volume claim of each instance.
// +kubebuilder:validation:XValidation:rule="quantity(string(self.size)).compareTo(quantity('64Mi')) >= 0",message="storage.size must be at least 64Mi: a new PostgreSQL cluster alone takes about 40MiB, before any WAL"
// +kubebuilder:validation:XValidation:rule="quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="storage.size cannot shrink: PostgreSQL volumes can only grow"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.storageClassName is immutable: existing volumes cannot move to another class"
type StorageSpec struct {
	// Requested size of each instance's volume, for example 10Gi. It can grow, never shrink.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Size resource.Quantity `json:"size"`

	// StorageClass of the volumes; empty uses the cluster's default class. Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors={"urn:alm:descriptor:io.kubernetes:StorageClass"}
	StorageClassName *string `json:"storageClassName,omitempty"`

	// What happens to the volume claims when the cluster is deleted: Retain (the default)
	// keeps them and their data, Delete removes them.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volume Reclaim Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	ReclaimPolicy PVCReclaimPolicy `json:"reclaimPolicy,omitempty"`
}

// PostgreSQLSpec is the user-tunable PostgreSQL configuration.
// pgpilot writes it into postgresql.conf and pg_hba.conf; these rules keep each parameter to
// one setting and each pg_hba entry to one record.
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || self.parameters.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*)?$'))`,message="postgresql.parameters names must be PostgreSQL setting names: a letter or '_', then letters, digits and '_', with at most one '.' (extension.setting)"
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || self.parameters.all(k, !(k.lowerAscii() in ['include', 'include_dir', 'include_if_exists']))`,message="postgresql.parameters cannot set include, include_dir or include_if_exists: they make PostgreSQL read other files"
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || self.parameters.all(k, k == k.lowerAscii() || !(k.lowerAscii() in ['listen_addresses', 'port', 'unix_socket_directories', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'external_pid_file', 'wal_level', 'hot_standby', 'wal_log_hints', 'password_encryption', 'primary_conninfo', 'primary_slot_name', 'restore_command', 'recovery_target_timeline', 'cluster_name', 'synchronous_standby_names', 'archive_mode', 'archive_command', 'logging_collector', 'log_destination', 'log_directory', 'log_filename', 'log_rotation_age', 'log_rotation_size', 'ssl', 'ssl_cert_file', 'ssl_key_file', 'ssl_ca_file', 'archive_cleanup_command', 'recovery_end_command', 'ssl_passphrase_command', 'archive_library', 'session_preload_libraries', 'local_preload_libraries', 'dynamic_library_path', 'jit_provider', 'oauth_validator_libraries', 'extension_control_path', 'output_plugin_libraries', 'shared_preload_libraries']))`,message="postgresql.parameters names a setting pgpilot manages or restricts in other letter case: PostgreSQL setting names are case-insensitive"
// +kubebuilder:validation:XValidation:rule=`!has(self.parameters) || self.parameters.all(k, !self.parameters[k].matches('[\\r\\n\\x00]'))`,message="postgresql.parameters values cannot contain line breaks or NUL characters"
// +kubebuilder:validation:XValidation:rule=`!has(self.pgHBA) || self.pgHBA.all(l, !l.matches('[\\r\\n\\x00]'))`,message="postgresql.pgHBA entries cannot contain line breaks or NUL characters: each entry is one pg_hba.conf line"
// +kubebuilder:validation:XValidation:rule=`!has(self.pgHBA) || self.pgHBA.all(l, !l.matches('^\\s*\\S+\\s+\\S+\\s+\\S*\\b(postgres|streaming_replica|pgpilot_monitor)\\b') && !l.matches('^\\s*\\S+\\s+\\S*\\breplication\\b'))`,message="postgresql.pgHBA entries cannot name the roles pgpilot manages (postgres, streaming_replica, pgpilot_monitor) or the replication database: pgpilot's own rules decide how they log in"
// +kubebuilder:validation:XValidation:rule=`!has(self.pgHBA) || self.pgHBA.all(l, !l.matches('^\\s*include'))`,message="postgresql.pgHBA entries cannot be include directives: they make PostgreSQL read other files"
// +kubebuilder:validation:XValidation:rule=`!has(self.pgHBA) || self.pgHBA.all(l, !l.matches('\\\\\\s*$'))`,message="postgresql.pgHBA entries cannot end with a backslash: PostgreSQL would continue the entry onto pgpilot's next rule"
type PostgreSQLSpec struct {
	// Settings written to postgresql.conf, for example {"max_connections": "200"}.
	// Settings pgpilot manages itself (listen_addresses, port, wal_level, hot_standby, file
	// locations, replication connection settings) are rejected.
	// +kubebuilder:validation:MaxProperties=200
	// +kubebuilder:validation:XValidation:rule="!('listen_addresses' in self)",message="postgresql.parameters.listen_addresses is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('port' in self)",message="postgresql.parameters.port is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('unix_socket_directories' in self)",message="postgresql.parameters.unix_socket_directories is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('data_directory' in self)",message="postgresql.parameters.data_directory is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('config_file' in self)",message="postgresql.parameters.config_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('hba_file' in self)",message="postgresql.parameters.hba_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ident_file' in self)",message="postgresql.parameters.ident_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('external_pid_file' in self)",message="postgresql.parameters.external_pid_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('wal_level' in self)",message="postgresql.parameters.wal_level is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('hot_standby' in self)",message="postgresql.parameters.hot_standby is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('wal_log_hints' in self)",message="postgresql.parameters.wal_log_hints is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('password_encryption' in self)",message="postgresql.parameters.password_encryption is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('primary_conninfo' in self)",message="postgresql.parameters.primary_conninfo is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('primary_slot_name' in self)",message="postgresql.parameters.primary_slot_name is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('restore_command' in self)",message="postgresql.parameters.restore_command is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('recovery_target_timeline' in self)",message="postgresql.parameters.recovery_target_timeline is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('cluster_name' in self)",message="postgresql.parameters.cluster_name is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('synchronous_standby_names' in self)",message="postgresql.parameters.synchronous_standby_names is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('archive_mode' in self)",message="postgresql.parameters.archive_mode is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('archive_command' in self)",message="postgresql.parameters.archive_command is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('logging_collector' in self)",message="postgresql.parameters.logging_collector is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('log_destination' in self)",message="postgresql.parameters.log_destination is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('log_directory' in self)",message="postgresql.parameters.log_directory is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('log_filename' in self)",message="postgresql.parameters.log_filename is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('log_rotation_age' in self)",message="postgresql.parameters.log_rotation_age is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('log_rotation_size' in self)",message="postgresql.parameters.log_rotation_size is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ssl' in self)",message="postgresql.parameters.ssl is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ssl_cert_file' in self)",message="postgresql.parameters.ssl_cert_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ssl_key_file' in self)",message="postgresql.parameters.ssl_key_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ssl_ca_file' in self)",message="postgresql.parameters.ssl_ca_file is managed by pgpilot and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('archive_cleanup_command' in self)",message="postgresql.parameters.archive_cleanup_command runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('recovery_end_command' in self)",message="postgresql.parameters.recovery_end_command runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('ssl_passphrase_command' in self)",message="postgresql.parameters.ssl_passphrase_command runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('archive_library' in self)",message="postgresql.parameters.archive_library runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('session_preload_libraries' in self)",message="postgresql.parameters.session_preload_libraries runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('local_preload_libraries' in self)",message="postgresql.parameters.local_preload_libraries runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('dynamic_library_path' in self)",message="postgresql.parameters.dynamic_library_path runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('jit_provider' in self)",message="postgresql.parameters.jit_provider runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('oauth_validator_libraries' in self)",message="postgresql.parameters.oauth_validator_libraries runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('extension_control_path' in self)",message="postgresql.parameters.extension_control_path runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('output_plugin_libraries' in self)",message="postgresql.parameters.output_plugin_libraries runs a command or loads code in the server and cannot be set"
	// +kubebuilder:validation:XValidation:rule="!('shared_preload_libraries' in self) || self['shared_preload_libraries'].matches('^ *(pg_stat_statements|auto_explain|pgaudit) *(, *(pg_stat_statements|auto_explain|pgaudit) *)*$')",message="postgresql.parameters.shared_preload_libraries may name only pg_stat_statements, auto_explain and pgaudit, separated by commas"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Parameters",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Parameters map[string]ParameterValue `json:"parameters,omitempty"`

	// Extra pg_hba.conf lines, inserted before pgpilot's own rules, for example
	// "hostssl app app 10.0.0.0/8 scram-sha-256".
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Extra pg_hba.conf Rules",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	PgHBA []string `json:"pgHBA,omitempty"`

	// Synchronous replication: a commit is acknowledged only once enough standbys have it on
	// disk. Absent, replication is asynchronous. pgpilot writes synchronous_standby_names.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Synchronous Replication"
	Synchronous *SynchronousSpec `json:"synchronous,omitempty"`
}

// SynchronousSpec is how many standbys confirm each commit, and what happens when too few can.
type SynchronousSpec struct {
	// any: any `number` of the standbys (quorum); first: the first `number` in instance order
	// that are connected.
	// +kubebuilder:validation:Enum=any;first
	// +kubebuilder:default=any
	// +optional
	Method string `json:"method,omitempty"`

	// How many standbys must confirm each commit.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=1
	// +optional
	Number int32 `json:"number,omitempty"`

	// required: a commit waits until `number` standbys confirm it, even when fewer are
	// connected, and a failover only promotes a replica that provably holds every acknowledged
	// commit. preferred: the primary asks only the standbys that stream at the moment, so
	// commits never wait on a missing standby, and a failover may lose the last ones.
	// +kubebuilder:validation:Enum=required;preferred
	// +kubebuilder:default=required
	// +optional
	DataDurability string `json:"dataDurability,omitempty"`
}

// Synchronous replication modes.
const (
	SynchronousAny      = "any"
	SynchronousFirst    = "first"
	DurabilityRequired  = "required"
	DurabilityPreferred = "preferred"
)

// BootstrapSpec says how a new cluster gets its data.
type BootstrapSpec struct {
	// Create an empty cluster with initdb.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="initdb"
	InitDB InitDBSpec `json:"initdb,omitempty"`

	// Restore another cluster's backup instead of running initdb; initdb's database and owner
	// then name the restored application database and its owner, whose password becomes this
	// cluster's.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Recovery"
	Recovery *RecoverySpec `json:"recovery,omitempty"`
}

// InitDBSpec configures the application database created at bootstrap.
type InitDBSpec struct {
	// Name of the application database.
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Application Database",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Database string `json:"database,omitempty"`

	// Name of the role that owns the application database; not one pgpilot manages (postgres,
	// streaming_replica, pgpilot_monitor) nor one PostgreSQL reserves (pg_*).
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'streaming_replica', 'pgpilot_monitor']) && !self.startsWith('pg_')",message="bootstrap.initdb.owner cannot be a role pgpilot manages (postgres, streaming_replica, pgpilot_monitor) or one PostgreSQL reserves (pg_*)"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Application Owner Role",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Owner string `json:"owner,omitempty"`

	// A Secret of type kubernetes.io/basic-auth in the cluster's namespace holding the owner's
	// username and password. When empty, pgpilot generates <cluster>-app.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Application Owner Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Secret *corev1.LocalObjectReference `json:"secret,omitempty"`
}

// SchedulingSpec constrains where instances run. Without an affinity, pgpilot prefers to spread
// instances across nodes.
type SchedulingSpec struct {
	// Affinity of the instance pods; replaces pgpilot's default anti-affinity when set.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Affinity",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the instance pods.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Tolerations",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Node labels the instance pods must match.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Node Selector",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// How the instance pods spread across topology domains.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Topology Spread Constraints",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// Condition types of a PostgresCluster.
const (
	// ConditionReady is True when the primary accepts writes and every instance is ready.
	ConditionReady = "Ready"
	// ConditionProgressing is True while pgpilot is moving the cluster towards its spec.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the cluster cannot reach or keep its spec.
	ConditionDegraded = "Degraded"
	// ConditionCollationVersionMismatch is True while a database's collation version, recorded
	// when it was created, differs from the one the running C library or ICU provides: indexes
	// on text sorted by the old rules may be corrupt until rebuilt. Absent until first found.
	ConditionCollationVersionMismatch = "CollationVersionMismatch"
	// ConditionMajorUpgrade is True while a major upgrade runs and once it completed, False when
	// its check found problems (each named) or it was reverted; absent before any.
	ConditionMajorUpgrade = "MajorUpgrade"
)

// Phase is a one-word summary of the cluster for `kubectl get`.
// +kubebuilder:validation:Enum=Pending;Bootstrapping;Ready;Scaling;Degraded;SwitchingOver;FailingOver;Upgrading;UpgradingMajor;Deleting
type Phase string

// Phases of a PostgresCluster.
const (
	PhasePending       Phase = "Pending"
	PhaseBootstrapping Phase = "Bootstrapping"
	PhaseReady         Phase = "Ready"
	PhaseScaling       Phase = "Scaling"
	PhaseDegraded      Phase = "Degraded"
	// PhaseSwitchingOver: a planned switchover moves the primary to status.targetPrimary.
	PhaseSwitchingOver Phase = "SwitchingOver"
	// PhaseFailingOver: the primary failed; pgpilot fences it and promotes status.targetPrimary.
	PhaseFailingOver Phase = "FailingOver"
	// PhaseUpgrading: pgpilot replaces instance pods whose template is outdated, one at a time.
	PhaseUpgrading Phase = "Upgrading"
	// PhaseUpgradingMajor: pgpilot moves the cluster to spec.postgresVersion
	// (status.majorUpgrade says which step).
	PhaseUpgradingMajor Phase = "UpgradingMajor"
	PhaseDeleting       Phase = "Deleting"
)

// PostgresClusterStatus is the observed state of a PostgresCluster.
type PostgresClusterStatus struct {
	// Latest observations of the cluster: Ready, Progressing and Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=2
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// One-word summary: Pending, Bootstrapping, Ready, Scaling, Degraded or Deleting.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors={"urn:alm:descriptor:io.kubernetes.phase"},order=1
	Phase Phase `json:"phase,omitempty"`

	// Number of instance pods that exist.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Instances",xDescriptors={"urn:alm:descriptor:text"},order=3
	Instances int32 `json:"instances,omitempty"`

	// Number of instances that are ready to serve.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Ready Instances",xDescriptors={"urn:alm:descriptor:text"},order=4
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// Name of the pod currently acting as primary.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Current Primary",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"},order=5
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// When currentPrimary last changed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Current Primary Since",xDescriptors={"urn:alm:descriptor:text"},order=6
	CurrentPrimaryTimestamp *metav1.Time `json:"currentPrimaryTimestamp,omitempty"`

	// The WAL timeline of the current primary.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Timeline",xDescriptors={"urn:alm:descriptor:text"},order=7
	Timeline int64 `json:"timeline,omitempty"`

	// The instance a switchover or a failover is making the primary, while it runs; empty
	// otherwise. The primary Lease (<name>-primary), which the agents obey, is granted to it
	// only once the old primary is fenced.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Target Primary",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"},order=10
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// When targetPrimary was set.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Target Primary Since",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=12
	TargetPrimaryTimestamp *metav1.Time `json:"targetPrimaryTimestamp,omitempty"`

	// The switchover annotation's value pgpilot last acted on: the annotation asks for one
	// switchover, not for a primary to be kept; remove it to ask again for the same instance.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Switchover Request",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=13
	SwitchoverRequest string `json:"switchoverRequest,omitempty"`

	// Why a running switchover started when pgpilot started it (to move the primary off an
	// outdated pod); empty for one the annotation asked for.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Switchover Reason",xDescriptors={"urn:alm:descriptor:text"},order=14
	SwitchoverReason string `json:"switchoverReason,omitempty"`

	// When pgpilot deleted the primary's outdated pod to replace it in place
	// (primaryUpdateMethod restart); failover waits for it meanwhile, up to two minutes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Primary Replaced At",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=16
	PrimaryReplacedAt *metav1.Time `json:"primaryReplacedAt,omitempty"`

	// Why a running failover started (what failed); empty during a switchover.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Failover Reason",xDescriptors={"urn:alm:descriptor:text"},order=15
	FailoverReason string `json:"failoverReason,omitempty"`

	// Where the demoted primary's WAL ended during a switchover: the target is promoted only
	// once it has replayed past it, so no acknowledged commit is lost.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Switchover LSN",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=11
	SwitchoverLSN string `json:"switchoverLSN,omitempty"`

	// The metadata.generation this status was computed from.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Observed Generation",xDescriptors={"urn:alm:descriptor:text"},order=6
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// The PostgreSQL major the cluster's data is in: spec.postgresVersion, or the major pgpilot
	// chose for a cluster without one when it created it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="PostgreSQL Major",xDescriptors={"urn:alm:descriptor:text"},order=8
	PostgresMajor int32 `json:"postgresMajor,omitempty"`

	// LegacySuperuserAccess records that the cluster was created before pgpilot 0.4.0, when the
	// superuser could always log in over the network: an unset spec.enableSuperuserAccess keeps
	// it so.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Legacy Superuser Access",xDescriptors={"urn:alm:descriptor:text"},order=18
	LegacySuperuserAccess bool `json:"legacySuperuserAccess,omitempty"`

	// StatementStatistics records that pgpilot loads pg_stat_statements (shared_preload_libraries)
	// and exports the top statements: set for clusters created by pgpilot 0.4.0 or later, so that
	// an operator upgrade restarts no running cluster to load it (add pg_stat_statements to
	// spec.postgresql.parameters.shared_preload_libraries for those).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Statement Statistics",xDescriptors={"urn:alm:descriptor:text"},order=22
	StatementStatistics bool `json:"statementStatistics,omitempty"`

	// The running server's version (e.g. 17.12), as the primary's agent reports it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="PostgreSQL Version",xDescriptors={"urn:alm:descriptor:text"},order=8
	PostgresVersion string `json:"postgresVersion,omitempty"`

	// Version of the pgpilot operator that last reconciled this cluster; after an operator
	// upgrade it tells which clusters the new version has taken over.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Operator Version",xDescriptors={"urn:alm:descriptor:text"},order=8
	OperatorVersion string `json:"operatorVersion,omitempty"`

	// What each instance's agent last reported.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=9
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Instances Status",order=7
	InstancesStatus []InstanceStatus `json:"instancesStatus,omitempty"`

	// The resourceVersion of each credentials Secret, by name, when pgpilot last looked: a
	// change is a rotation, which pgpilot announces and hurries the instances to apply.
	// +kubebuilder:validation:MaxProperties=8
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Credentials Versions",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=9
	CredentialsVersions map[string]string `json:"credentialsVersions,omitempty"`

	// The repository and WAL archiving, when spec.backup is set.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup",order=17
	Backup *ClusterBackupStatus `json:"backup,omitempty"`

	// The major upgrade under way, or the last one's outcome.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Major Upgrade",order=19
	MajorUpgrade *MajorUpgradeStatus `json:"majorUpgrade,omitempty"`

	// How each of spec.roles stands on the primary.
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Roles",order=20
	Roles []ManagedRoleStatus `json:"roles,omitempty"`

	// The managed roles and databases the primary's agent last reported on (their declaration
	// and their Secrets' versions, never a password), and the report's generation.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Catalog Reported",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:hidden"},order=21
	CatalogReported string `json:"catalogReported,omitempty"`
}

// InstanceStatus is one instance as its agent reported it.
type InstanceStatus struct {
	// Name of the instance's pod.
	Name string `json:"name"`

	// Whether the pod is ready (PostgreSQL accepts connections).
	// +optional
	Ready bool `json:"ready,omitempty"`

	// Release of the instance agent in the pod, as the agent reports it. During an operator
	// upgrade, the instances not yet replaced show the earlier release.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// The server's version (e.g. 17.12), as its agent reports it.
	// +optional
	PostgresVersion string `json:"postgresVersion,omitempty"`

	// primary or replica, as PostgreSQL itself says (pg_is_in_recovery).
	// +optional
	Role string `json:"role,omitempty"`

	// WAL timeline the instance is on.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`

	// WAL position: the current write position of a primary, the replayed one of a replica.
	// +optional
	LSN string `json:"lsn,omitempty"`

	// Whether a replica streams WAL from the primary.
	// +optional
	Streaming bool `json:"streaming,omitempty"`

	// Bytes of WAL a replica has yet to replay, as the primary sees it.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// How long the replica took to replay recent WAL, as the primary measures it (e.g. 12ms);
	// empty once it has caught up and the primary writes nothing.
	// +optional
	ReplayLag string `json:"replayLag,omitempty"`

	// How the primary counts the replica for synchronous commit: sync, quorum, potential or
	// async (pg_stat_replication.sync_state).
	// +optional
	SyncState string `json:"syncState,omitempty"`

	// Settings changed in the configuration that take effect only after a restart.
	// +optional
	PendingRestart []string `json:"pendingRestart,omitempty"`

	// Why the agent could not be asked, when it could not.
	// +optional
	Error string `json:"error,omitempty"`

	// Why the instance's PostgreSQL is held down (fenced), when it is.
	// +optional
	Fenced string `json:"fenced,omitempty"`

	// When this former primary last rejoined as a standby (rewind or clone); its Event says
	// what it had that the new primary never received.
	// +optional
	RejoinedAt string `json:"rejoinedAt,omitempty"`
}

// PostgresCluster is a highly available PostgreSQL cluster: a primary, streaming replicas,
// and the Services applications connect to (<name>-rw, <name>-ro, <name>-r).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.postgresVersion) || (has(self.spec.postgresVersion) && (self.spec.postgresVersion >= oldSelf.spec.postgresVersion || (has(self.status) && has(self.status.postgresMajor) && self.spec.postgresVersion == self.status.postgresMajor)))",message="spec.postgresVersion cannot be lowered or removed, except back to the major the cluster's data is in (status.postgresMajor), which cancels a major upgrade before its point of no return: data of a newer major cannot run on an older server"
// +operator-sdk:csv:customresourcedefinitions:displayName="PostgreSQL Cluster",resources={{StatefulSet,v1},{Pod,v1},{Service,v1},{Secret,v1},{ConfigMap,v1},{PodDisruptionBudget,v1},{PersistentVolumeClaim,v1},{Event,v1}}
// +kubebuilder:resource:shortName=pgc,categories=pgpilot
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.spec.instances`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.currentPrimary`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.postgresVersion`
// +kubebuilder:printcolumn:name="Timeline",type=integer,JSONPath=`.status.timeline`,priority=1
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.status.operatorVersion`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name may have at most 52 characters: the StatefulSet's pods carry a controller-revision-hash label of the name plus 11 characters, and label values are limited to 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and '-', start with a letter and end with a letter or digit (no '.'): it names the cluster's Services, which are DNS-1035 labels"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.backup) || !has(self.spec.bootstrap.recovery) || self.spec.bootstrap.recovery.clusterName != self.metadata.name || has(self.spec.bootstrap.recovery.namespace) || self.spec.bootstrap.recovery.repository.endpoint != self.spec.backup.repository.endpoint || self.spec.bootstrap.recovery.repository.bucket != self.spec.backup.repository.bucket || self.spec.bootstrap.recovery.repository.path != self.spec.backup.repository.path",message="spec.backup.repository would be the repository the cluster recovers from: a restored cluster archives into its own (another name, bucket or path)"
type PostgresCluster struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Desired state of the cluster.
	// +required
	Spec PostgresClusterSpec `json:"spec"`

	// Observed state of the cluster, written by pgpilot.
	// +optional
	Status PostgresClusterStatus `json:"status,omitempty"`
}

// PostgresClusterList is a list of PostgresClusters.
// +kubebuilder:object:root=true
type PostgresClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// The PostgresClusters.
	Items []PostgresCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PostgresCluster{}, &PostgresClusterList{})
}
