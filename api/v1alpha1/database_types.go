package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReclaimPolicy says what becomes of a PostgreSQL database when its Database object is deleted.
// +kubebuilder:validation:Enum=retain;delete
type ReclaimPolicy string

const (
	// ReclaimRetain leaves the database and its data on the server; pgpilot stops managing it.
	ReclaimRetain ReclaimPolicy = "retain"
	// ReclaimDelete drops the database (the server refuses while clients are connected, and the
	// Database says so until they are gone).
	ReclaimDelete ReclaimPolicy = "delete"
)

// DatabaseDropFinalizer holds a Database with reclaimPolicy delete until its database is dropped.
const DatabaseDropFinalizer = "postgres.pgpilot.io/drop-database"

// DatabaseSpec is a PostgreSQL database of a cluster, with its schemas and extensions.
// +kubebuilder:validation:XValidation:rule="has(self.encoding) == has(oldSelf.encoding) && has(self.locale) == has(oldSelf.locale)",message="encoding and locale are set when the database is made and cannot change"
type DatabaseSpec struct {
	// The PostgresCluster in this namespace the database lives in.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change: make a Database for the other cluster"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PostgreSQL Cluster",xDescriptors={"urn:alm:descriptor:io.kubernetes:postgres.pgpilot.io:v1alpha1:PostgresCluster"},order=1
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// The database's name in PostgreSQL; not postgres, template0, template1, nor the cluster's
	// application database (spec.bootstrap.initdb.database), which pgpilot manages itself.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="name cannot change: PostgreSQL would rename the database, pgpilot does not"
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="name cannot be postgres, template0 or template1"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	Name string `json:"name"`

	// The role that owns the database; it must exist (spec.roles of the cluster, or made by
	// hand), and may not be one pgpilot keeps for itself.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['streaming_replica', 'pgpilot_monitor']) && !self.startsWith('pg_')",message="owner cannot be a role pgpilot keeps for itself (streaming_replica, pgpilot_monitor) or one PostgreSQL reserves (pg_*)"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Owner",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=3
	Owner string `json:"owner"`

	// The character set when the database is made (e.g. UTF8); unset, the cluster's default.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="encoding is set when the database is made and cannot change"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Encoding",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=5
	Encoding string `json:"encoding,omitempty"`

	// The collation and character classification when the database is made (e.g. C.UTF-8);
	// unset, the cluster's default.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.@-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="locale is set when the database is made and cannot change"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Locale",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=6
	Locale string `json:"locale,omitempty"`

	// How many connections the database takes at once; -1 (the default) for no limit.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Connection Limit",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"},order=7
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// retain (the default) leaves the database and its data when this object is deleted; delete
	// drops it.
	// +kubebuilder:default=retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Reclaim Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:retain","urn:alm:descriptor:com.tectonic.ui:select:delete"},order=4
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// Schemas pgpilot makes and keeps owned as declared; schemas not listed are left alone.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schemas",order=8
	Schemas []DatabaseSchemaSpec `json:"schemas,omitempty"`

	// Extensions pgpilot creates, updates and drops in the database, as its owner: only those
	// PostgreSQL marks trusted (pgcrypto, hstore, citext, pg_trgm…); others are refused and reported.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Extensions",order=9
	Extensions []DatabaseExtensionSpec `json:"extensions,omitempty"`
}

// DatabaseSchemaSpec is a schema of a managed database.
type DatabaseSchemaSpec struct {
	// The schema's name; not one PostgreSQL reserves (pg_*, information_schema).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'information_schema' && !self.startsWith('pg_')",message="schemas[].name cannot be information_schema or pg_*"
	Name string `json:"name"`
	// The role that owns it; unset, the database's owner.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['streaming_replica', 'pgpilot_monitor']) && !self.startsWith('pg_')",message="schemas[].owner cannot be a role pgpilot keeps for itself or pg_*"
	// +optional
	Owner string `json:"owner,omitempty"`
	// present (the default) or absent: an absent schema is dropped when it is empty (never with
	// what it holds; the server refuses, and the status says so).
	// +kubebuilder:default=present
	// +optional
	Ensure RoleEnsure `json:"ensure,omitempty"`
}

// DatabaseExtensionSpec is an extension of a managed database.
type DatabaseExtensionSpec struct {
	// The extension's name, as pg_available_extensions has it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	Name string `json:"name"`
	// The version to have (ALTER EXTENSION … UPDATE TO it); unset, the image's default version
	// when the extension is created, and no update afterwards.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	Version string `json:"version,omitempty"`
	// The schema to create it in; unset, the first of the database's search_path.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	Schema string `json:"schema,omitempty"`
	// present (the default) or absent: an absent extension is dropped (never CASCADE: the server
	// refuses while other objects depend on it, and the status says so).
	// +kubebuilder:default=present
	// +optional
	Ensure RoleEnsure `json:"ensure,omitempty"`
}

// DatabaseStatus is what the cluster's primary last made of the database.
type DatabaseStatus struct {
	// The generation the state is of.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Observed Generation",xDescriptors={"urn:alm:descriptor:text"},order=3
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Applied, Drift (changed by hand and put back), Error, or Pending before the primary's agent
	// reported on it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="State",xDescriptors={"urn:alm:descriptor:text"},order=1
	State string `json:"state,omitempty"`
	// What the last pass that changed something changed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Changed",order=4
	Changed []string `json:"changed,omitempty"`
	// Why the database is not as declared.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Message",xDescriptors={"urn:alm:descriptor:text"},order=2
	Message string `json:"message,omitempty"`
	// Each declared schema's state.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Schemas",order=5
	Schemas []DatabaseItemStatus `json:"schemas,omitempty"`
	// Each declared extension's state, with the version installed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Extensions",order=6
	Extensions []DatabaseItemStatus `json:"extensions,omitempty"`
}

// DatabaseItemStatus is a schema's or an extension's state.
type DatabaseItemStatus struct {
	// The schema's or extension's name, as the spec has it.
	Name string `json:"name"`
	// Applied, Drift, Error or Absent (declared absent and not there).
	State string `json:"state"`
	// The version installed (extensions).
	// +optional
	Version string `json:"version,omitempty"`
	// What the last pass that changed something changed.
	// +optional
	Changed []string `json:"changed,omitempty"`
	// Why it is not as declared (the server's error, an extension the image lacks).
	// +optional
	Message string `json:"message,omitempty"`
}

// Database is a PostgreSQL database of a PostgresCluster, kept by the cluster's primary as
// declared: owner, connection limit, schemas and extensions. Teams can own their databases in
// their own manifests; deleting one drops nothing unless reclaimPolicy is delete.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +operator-sdk:csv:customresourcedefinitions:displayName="PostgreSQL Database",resources={{PostgresCluster,v1alpha1}}
// +kubebuilder:resource:categories=pgpilot,shortName=pgdb
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// The database as declared.
	// +required
	Spec DatabaseSpec `json:"spec"`
	// What the primary made of it, written by pgpilot.
	// +optional
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// The Databases.
	Items []Database `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Database{}, &DatabaseList{})
}
