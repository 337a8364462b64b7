package agentapi

// The managed catalog: the operator sends the primary's agent the roles a cluster's spec declares
// and its Database objects (PathCatalog), the agent brings the server in line one item at a time,
// roles before databases, and reports each one. It keeps the last set it was given and looks for
// drift on its own (CatalogDriftInterval); Status.Catalog says which set it holds and when its
// report last changed, so that the operator sends a set only when the spec, a Database or a
// Secret changed, and reads the report only when it moved.

import (
	"fmt"
	"time"
)

// PathCatalog takes a CatalogRequest (PUT), answered 202 at once: the agent applies it in the
// background, and Status.Roles says when its report moved. GET answers the latest report. Only a
// primary takes a request: 409 (ErrWrongRole) on a standby.
const PathCatalog = "/v1/catalog"

// CatalogDriftInterval is how often the primary's agent compares the roles it was given with the
// server's catalogs, and repairs and reports what someone changed by hand.
const CatalogDriftInterval = time.Minute

// ManagedRole is one role as the spec declares it, with its password when its Secret has one.
type ManagedRole struct {
	Name string `json:"name"`
	// Absent: the role is dropped when it exists (spec ensure: absent).
	Absent          bool   `json:"absent,omitempty"`
	Login           bool   `json:"login,omitempty"`
	Inherit         bool   `json:"inherit,omitempty"`
	CreateDB        bool   `json:"createdb,omitempty"`
	CreateRole      bool   `json:"createrole,omitempty"`
	ConnectionLimit int32  `json:"connectionLimit"`
	Comment         string `json:"comment,omitempty"`
	// ValidUntil is when the password stops being accepted; nil: never.
	ValidUntil *time.Time `json:"validUntil,omitempty"`
	// InRoles are the roles it is a member of, and nothing else.
	InRoles []string `json:"inRoles,omitempty"`
	// Password is the one the role's Secret holds; nil keeps whatever password the role has (no
	// Secret named, or the Secret missing: a password is never removed for want of one).
	Password *string `json:"password,omitempty"`
	// DisablePassword removes the role's password: the spec asks for it.
	DisablePassword bool `json:"disablePassword,omitempty"`
}

// CatalogRequest is the whole set of roles the spec manages. Fingerprint identifies it (the spec's
// roles and their Secrets' versions, never the passwords); the agent reports it back.
type CatalogRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Roles       []ManagedRole `json:"roles"`
	// Databases are the cluster's Database objects, each under its PostgreSQL name.
	Databases []ManagedDatabase `json:"databases,omitempty"`
	// ForbiddenDatabases are databases no Database may manage besides postgres and the
	// templates: the application's (its owner and extensions are the bootstrap's).
	ForbiddenDatabases []string `json:"forbiddenDatabases,omitempty"`
	// Forbidden are names no managed role may be, nor be a member of, besides ReservedRole's: the
	// application's owner (its password is the bootstrap Secret's).
	Forbidden []string `json:"forbidden,omitempty"`
}

// What became of a managed role in the last pass.
const (
	// RoleApplied: the server has the role as declared; Changed lists what this pass changed.
	RoleApplied = "Applied"
	// RoleDrift: the role was as declared, someone changed it by hand, and the pass put it back
	// (Changed says what).
	RoleDrift = "Drift"
	// RoleError: the server refused a statement, or the role may not be made (Message says why);
	// the other roles are applied all the same.
	RoleError = "Error"
)

// RoleResult is one role's outcome.
type RoleResult struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Changed []string `json:"changed,omitempty"`
	Message string   `json:"message,omitempty"`
}

// CatalogReport is the outcome of the latest pass over a CatalogRequest.
type CatalogReport struct {
	Fingerprint string `json:"fingerprint"`
	// Generation counts the passes whose outcome differed from the one before.
	Generation int64            `json:"generation"`
	Statements int              `json:"statements"`
	Roles      []RoleResult     `json:"roles"`
	Databases  []DatabaseResult `json:"databases,omitempty"`
}

// CatalogState is what Status says of the managed roles: which set the agent holds, and which
// report is its latest (ReportID; empty before the first).
type CatalogState struct {
	Fingerprint string `json:"fingerprint"`
	Report      string `json:"report,omitempty"`
}

// ID names the report in Status (CatalogState.Report).
func (r *CatalogReport) ID() string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%s/%d", r.Fingerprint, r.Generation)
}

// ManagedDatabase is one Database object as the agent applies it.
type ManagedDatabase struct {
	Name string `json:"name"`
	// Absent: the database is dropped when it exists (its object was deleted with reclaimPolicy
	// delete).
	Absent bool   `json:"absent,omitempty"`
	Owner  string `json:"owner"`
	// Encoding and Locale apply when the database is made; empty, the server's defaults.
	Encoding        string             `json:"encoding,omitempty"`
	Locale          string             `json:"locale,omitempty"`
	ConnectionLimit int32              `json:"connectionLimit"`
	Schemas         []ManagedSchema    `json:"schemas,omitempty"`
	Extensions      []ManagedExtension `json:"extensions,omitempty"`
}

// ManagedSchema is a schema of a managed database; Owner is never empty (the operator puts the
// database's owner in).
type ManagedSchema struct {
	Name   string `json:"name"`
	Owner  string `json:"owner"`
	Absent bool   `json:"absent,omitempty"`
}

// ManagedExtension is an extension of a managed database. Version empty: the image's default
// version when it is created, and no update.
type ManagedExtension struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Schema  string `json:"schema,omitempty"`
	Absent  bool   `json:"absent,omitempty"`
}

// ItemAbsent: a schema or extension declared absent is not there (databases: dropped).
const ItemAbsent = "Absent"

// DatabaseKept: a database whose Database was deleted with reclaimPolicy delete was left in
// place, since pgpilot did not make it.
const DatabaseKept = "Kept"

// ItemPending: the primary's agent has not reported on a role or database yet.
const ItemPending = "Pending"

// DatabaseResult is one database's outcome, with each declared schema's and extension's.
type DatabaseResult struct {
	Name       string       `json:"name"`
	State      string       `json:"state"`
	Changed    []string     `json:"changed,omitempty"`
	Message    string       `json:"message,omitempty"`
	Schemas    []ItemResult `json:"schemas,omitempty"`
	Extensions []ItemResult `json:"extensions,omitempty"`
}

// ItemResult is a schema's or an extension's outcome; Version is the extension's installed one.
type ItemResult struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Version string   `json:"version,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Message string   `json:"message,omitempty"`
}
