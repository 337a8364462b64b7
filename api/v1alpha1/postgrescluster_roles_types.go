package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRolePasswordSecrets is how many of spec.roles may name a passwordSecret: the admission
// policy checks that whoever names a Secret may read it, one authorizer check each, and a policy's
// CEL budget holds few.
const MaxRolePasswordSecrets = 8

// RoleEnsure says whether a managed role exists.
// +kubebuilder:validation:Enum=present;absent
type RoleEnsure string

const (
	RolePresent RoleEnsure = "present"
	RoleAbsent  RoleEnsure = "absent"
)

// ManagedRoleSpec is a PostgreSQL role pgpilot keeps as declared on the primary. A managed role
// is never a superuser, a replication role or above row security, and pgpilot changes nothing of
// a role that is a superuser. Without passwordSecret the role keeps whatever password it has.
// +kubebuilder:validation:XValidation:rule="!(has(self.passwordSecret) && has(self.disablePassword) && self.disablePassword)",message="a role takes its password from passwordSecret or has it removed by disablePassword, not both"
type ManagedRoleSpec struct {
	// The role's name; not one pgpilot manages (postgres, streaming_replica, pgpilot_monitor),
	// the application owner, nor one PostgreSQL reserves (pg_*).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'streaming_replica', 'pgpilot_monitor']) && !self.startsWith('pg_')",message="roles[].name cannot be a role pgpilot manages (postgres, streaming_replica, pgpilot_monitor) or one PostgreSQL reserves (pg_*)"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Name string `json:"name"`

	// present (the default) keeps the role as declared; absent drops it when it exists (the
	// server refuses while it owns objects, and the role's status says so).
	// +kubebuilder:default=present
	// +optional
	Ensure RoleEnsure `json:"ensure,omitempty"`

	// The role may log in.
	// +optional
	Login bool `json:"login,omitempty"`

	// The role uses the privileges of the roles it is a member of without SET ROLE.
	// +kubebuilder:default=true
	// +optional
	Inherit *bool `json:"inherit,omitempty"`

	// The role may create databases.
	// +optional
	CreateDB bool `json:"createdb,omitempty"`

	// The role may create and manage other roles that are not superusers. Refused on PostgreSQL
	// 15, where it may grant itself any role but a superuser (pg_execute_server_program too).
	// +optional
	CreateRole bool `json:"createrole,omitempty"`

	// How many connections the role may hold at once; -1 (the default) for no limit.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// When the role's password stops being accepted; unset, never.
	// +optional
	ValidUntil *metav1.Time `json:"validUntil,omitempty"`

	// The roles it is a member of, and no others: memberships granted by hand are revoked. Not a
	// role pgpilot manages, a superuser, nor pg_execute_server_program, pg_read_server_files or
	// pg_write_server_files, whose members act as the server's OS user.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(r, !(r in ['postgres', 'streaming_replica', 'pgpilot_monitor', 'pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files']))",message="roles[].inRoles cannot name a role pgpilot manages, nor pg_execute_server_program, pg_read_server_files or pg_write_server_files: their members act as the server's OS user"
	// +listType=set
	// +optional
	InRoles []string `json:"inRoles,omitempty"`

	// A comment on the role (COMMENT ON ROLE).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Comment string `json:"comment,omitempty"`

	// A Secret of type kubernetes.io/basic-auth in the cluster's namespace whose password the
	// role logs in with; its username, when set, must be the role's name. A changed password is
	// applied without a restart. When the Secret is missing the role keeps the password it has.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Password Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	PasswordSecret *corev1.LocalObjectReference `json:"passwordSecret,omitempty"`

	// Remove the role's password: it can no longer log in with one.
	// +optional
	DisablePassword bool `json:"disablePassword,omitempty"`
}

// ManagedRoleStatus is what the primary's agent last made of a managed role.
type ManagedRoleStatus struct {
	// The role's name, as spec.roles has it.
	Name string `json:"name"`
	// Applied, Drift (changed by hand and put back) or Error; Pending before the primary's agent
	// reported on it.
	State string `json:"state"`
	// What the last pass that changed something changed.
	// +optional
	Changed []string `json:"changed,omitempty"`
	// Why the role is not as declared (the server's error, a refusal, a missing Secret).
	// +optional
	Message string `json:"message,omitempty"`
}
