package agentapi

import (
	"errors"
	"regexp"
	"strings"
	"time"
)

// Paths of the agent's HTTP API. The probes are unauthenticated (the kubelet calls them); the
// /v1 paths need the cluster's agent token.
const (
	PathStartup   = "/startupz"
	PathLiveness  = "/healthz"
	PathReadiness = "/readyz"
	PathStatus    = "/v1/status"
	// PathDropSlots takes a DropSlotsRequest and answers a DropSlotsResponse (on the primary).
	PathDropSlots = "/v1/replication-slots/drop"
	// PathRestart restarts PostgreSQL in the background, for settings pending a restart:
	// 202 when started, 409 when a restart is already running.
	PathRestart = "/v1/restart"
	// PathPromote turns a standby into the primary: PromoteRequest, PromoteResponse; 409 when
	// the instance is not a standby or is busy restarting.
	PathPromote = "/v1/promote"
	// PathDemote shuts a primary down cleanly and starts it again as a standby of the
	// primary host (the -rw Service): DemoteResponse; 409 when it is not a primary or busy.
	PathDemote = "/v1/demote"
	// PathFence stops a primary's PostgreSQL at once (an immediate shutdown: no session
	// commits anything more) and keeps it stopped until the primary Lease is granted again:
	// to this instance, which then starts as the primary, or to another, which it then follows.
	// It answers a Status once PostgreSQL is down.
	PathFence = "/v1/fence"
	// PathDetach, on a standby, stops its WAL receiver and holds it off (DetachRequest,
	// answered by the Status): it no longer vouches for a primary the operator cannot reach,
	// which then fences itself (docs/high-availability.md). PathAttach ends the hold.
	PathDetach = "/v1/detach"
	PathAttach = "/v1/attach"
)

// PromoteRequest names the physical replication slots the new primary creates, one for each
// instance that will stream from it.
type PromoteRequest struct {
	Slots []string `json:"slots"`
}

// PromoteResponse is the new primary's timeline.
type PromoteResponse struct {
	Timeline int64 `json:"timeline"`
}

// DemoteResponse says where the demoted primary's WAL ends: a standby that replayed past
// ShutdownLSN holds every commit it acknowledged, when Clean (a shutdown checkpoint was written).
type DemoteResponse struct {
	ShutdownLSN string `json:"shutdownLSN"`
	Clean       bool   `json:"clean"`
}

// ErrWrongRole is a role change asked of an instance that does not have the role it needs.
var ErrWrongRole = errors.New("the instance does not have the role this needs")

// ErrNotSupported is an order the agent does not know: it is of an older release.
var ErrNotSupported = errors.New("the agent does not support this request")

// LocalSuperuserMap is the pg_ident.conf map through which the agent's OS user logs in as the
// superuser over the local socket; pg_hba.conf's first line names it.
const LocalSuperuserMap = "pgpilot"

// ErrRestartInProgress is a restart request refused because one is already running.
var ErrRestartInProgress = errors.New("a restart is already in progress")

// DetachRequest orders a standby to stop streaming from From, the primary the operator
// cannot reach, for DetachHold.
type DetachRequest struct {
	From string `json:"from"`
}

// Role names an instance reports.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

// CollationMismatch is a database whose default collation changed version under it.
type CollationMismatch struct {
	Database string `json:"database"`
	// Recorded is pg_database.datcollversion, Actual what the library reports now.
	Recorded string `json:"recorded"`
	Actual   string `json:"actual"`
}

// Status is what an instance reports about itself (PathStatus).
type Status struct {
	// Version is the agent's release (pgpilot's VERSION). Agents of 0.2.0, the first release
	// with an agent, do not send it: see VersionOf.
	Version string `json:"version,omitempty"`
	// ServerVersion is the running server's version, major.minor (17.12); empty while it is
	// not running (and from agents older than this field).
	ServerVersion string `json:"serverVersion,omitempty"`
	// CollationMismatches are the databases whose recorded collation version differs from the
	// one the server's library provides now.
	CollationMismatches []CollationMismatch `json:"collationMismatches,omitempty"`
	// Role is RolePrimary or RoleReplica (in recovery); empty while Fenced.
	Role string `json:"role"`
	// Unresponsive, on a primary, says why its PostgreSQL counts as frozen: it has not answered
	// the agent's local queries for UnresponsiveAfter; "" while it answers (and from agents older
	// than this field).
	Unresponsive string `json:"unresponsive,omitempty"`
	// Fenced: PostgreSQL is stopped and stays stopped until the primary Lease is granted
	// again; FencedReason says why (lost Lease, crash, the operator's order, shutdown).
	Fenced       bool   `json:"fenced,omitempty"`
	FencedReason string `json:"fencedReason,omitempty"`
	// Rejoined is the last time this instance, a former primary, became a standby of a new one.
	Rejoined *Rejoin `json:"rejoined,omitempty"`
	// LeaseTransitions is the primary Lease's count of grants as the agent last saw it.
	LeaseTransitions int32 `json:"leaseTransitions,omitempty"`
	// Timeline of the WAL the server is on.
	Timeline int64 `json:"timeline"`
	// CurrentLSN is the primary's current WAL write position.
	CurrentLSN string `json:"currentLSN,omitempty"`
	// ReceiveLSN and ReplayLSN are how far a replica has received and applied WAL.
	ReceiveLSN string `json:"receiveLSN,omitempty"`
	ReplayLSN  string `json:"replayLSN,omitempty"`
	// DetachedFrom names the primary this standby was detached from (PathDetach), and
	// DetachedMillis how long ago its WAL receiver was seen stopped for it; empty and 0 while it
	// may stream (and from agents older than these fields).
	DetachedFrom   string `json:"detachedFrom,omitempty"`
	DetachedMillis int64  `json:"detachedMillis,omitempty"`
	// Catalog, on a primary given managed roles and databases, says which set it holds and which report is its
	// latest (PathCatalog).
	Catalog *CatalogState `json:"catalog,omitempty"`
	// Streaming is true on a replica whose WAL receiver streams from the primary.
	Streaming bool `json:"streaming"`
	// PendingRestart lists settings changed in the files that take effect only on a restart.
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// ConfigHash identifies the configuration files the server last loaded (ConfigHash); empty
	// from an agent older than this field.
	ConfigHash string `json:"configHash,omitempty"`
	// CertificatesDigest identifies the certificate files the agent last loaded
	// (CertificatesDigest of them); the operator moves a CA rotation on only once every instance
	// has loaded what the cluster's TLS Secret holds. Empty without certificates (and from an
	// agent older than this field).
	CertificatesDigest string `json:"certificatesDigest,omitempty"`
	// Replicas is, on a primary, every standby connected for streaming replication.
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
	// Slots are the physical replication slots, which keep WAL for their standbys.
	Slots []SlotStatus `json:"slots,omitempty"`
	// Archive is, on a primary of a cluster with a backup repository, its WAL archiving.
	Archive *ArchiveStatus `json:"archive,omitempty"`
	// Metrics is how the exporter fares with the user's custom queries; nil without any (and
	// from an agent older than this field).
	Metrics *MetricsStatus `json:"metrics,omitempty"`
	// LogNotices are the kinds of notable PostgreSQL log records the agent has seen since it
	// started (authentication failures, archive_command failures, a full disk, PANICs), which
	// the operator turns into Events; nil from an agent older than this field.
	LogNotices []LogNotice `json:"logNotices,omitempty"`
}

// LogNotice counts one kind of notable PostgreSQL log record.
type LogNotice struct {
	// Reason is the kind, also the Event's reason: one of the LogNotice* constants.
	Reason string `json:"reason"`
	// Message is the latest such record's, with its client where it has one.
	Message string `json:"message"`
	// Count is how many such records the agent has seen since it started.
	Count int64 `json:"count"`
	// Last is when PostgreSQL logged the latest.
	Last time.Time `json:"last"`
}

// The kinds of LogNotice.
const (
	LogNoticeAuthenticationFailed = "AuthenticationFailed"
	LogNoticeArchiveCommandFailed = "ArchiveCommandFailed"
	LogNoticeDiskFull             = "DiskFull"
	LogNoticePanic                = "PostgreSQLPanic"
)

// MetricsStatus is what the operator needs to tell the user about their custom queries.
type MetricsStatus struct {
	// CustomQueries is how many custom queries the exporter runs.
	CustomQueries int `json:"customQueries"`
	// LoadError says why the query files as they are now were not loaded (the ones loaded
	// before still run).
	LoadError string `json:"loadError,omitempty"`
	// FailingQueries failed in the last scrape.
	FailingQueries []string `json:"failingQueries,omitempty"`
}

// How a former primary rejoined.
const (
	RejoinRewind = "rewind"
	RejoinClone  = "clone"
)

// Rejoin is how a former primary became a standby of the new one, and what it had that the new
// primary never received: its WAL from DivergedAt on (a rewind), or everything after the
// new primary's fork (a clone, after the rewind failed with Error).
type Rejoin struct {
	Method        string `json:"method"`
	At            string `json:"at"`
	DivergedAt    string `json:"divergedAt,omitempty"`
	OldTimeline   string `json:"oldTimeline,omitempty"`
	OldCheckpoint string `json:"oldCheckpoint,omitempty"`
	Error         string `json:"error,omitempty"`
}

// SlotStatus is one physical replication slot.
type SlotStatus struct {
	Name   string `json:"name"`
	Active bool   `json:"active"`
}

// ReplicaStatus is one standby as the primary sees it in pg_stat_replication.
type ReplicaStatus struct {
	ApplicationName string `json:"applicationName"`
	State           string `json:"state"`
	ReplayLSN       string `json:"replayLSN"`
	// LagBytes is how much WAL the standby has yet to replay.
	LagBytes int64 `json:"lagBytes"`
	// ReplayLagSeconds is how long the standby took to replay recent WAL (replay_lag); nil
	// once it has caught up and the primary writes nothing.
	ReplayLagSeconds *float64 `json:"replayLagSeconds,omitempty"`
	// SyncState is pg_stat_replication.sync_state: sync, quorum, potential or async.
	SyncState string `json:"syncState,omitempty"`
}

// DropSlotsRequest names the replication slots to drop; those a standby uses are kept.
type DropSlotsRequest struct {
	Slots []string `json:"slots"`
}

// DropSlotsResponse names the slots actually dropped. Its key is the request's, as agents have
// answered since 0.2.0, so that operators and agents of either version understand each other.
type DropSlotsResponse struct {
	Dropped []string `json:"slots"`
}

var slotUnsafe = regexp.MustCompile(`[^a-z0-9_]`)

// SlotName is the physical replication slot the agent of pod creates on the primary when it
// clones it, e.g. db-1 → db_1; the operator drops it when the instance is scaled away.
func SlotName(pod string) string {
	return slotUnsafe.ReplaceAllString(strings.ToLower(pod), "_")
}

// UnversionedAgent is the release of an agent whose Status has no Version: 0.2.0, the only
// release with an agent before the field.
const UnversionedAgent = "0.2.0"

// VersionOf is the release of the agent that sent status.
func VersionOf(status *Status) string {
	if status.Version == "" {
		return UnversionedAgent
	}
	return status.Version
}

// The major upgrade's check (on an instance running its data from the older major's carried
// server): started in the background, polled, so that no reconcile waits on it.
const (
	// PathMajorUpgradeCheck: POST a MajorUpgradeCheckRequest to start the check (202, or 200
	// when one runs or ran with the same mode; 409 when the instance has nothing to upgrade
	// from); GET its MajorUpgradeCheckResult (404 before any).
	PathMajorUpgradeCheck = "/v1/major-upgrade/check"
)

// ErrNothingToUpgrade: the instance runs its image's own major.
var ErrNothingToUpgrade = errors.New("the instance runs its image's major: no older major is carried, nothing to upgrade from")

// MajorUpgradeCheckRequest asks for the checks of an upgrade in Mode (link or copy).
type MajorUpgradeCheckRequest struct {
	Mode string `json:"mode"`
}

// Phases of a major upgrade's check.
const (
	UpgradeCheckRunning = "Running"
	// UpgradeCheckPassed: nothing keeps the upgrade from starting.
	UpgradeCheckPassed = "Passed"
	// UpgradeCheckFailed: Problems list what must change first.
	UpgradeCheckFailed = "Failed"
	// UpgradeCheckError: the check itself could not run (Error says why).
	UpgradeCheckError = "Error"
)

// MajorUpgradeCheckResult is the latest check as the agent knows it.
type MajorUpgradeCheckResult struct {
	From      int      `json:"from"`
	To        int      `json:"to"`
	Mode      string   `json:"mode"`
	Phase     string   `json:"phase"`
	Problems  []string `json:"problems,omitempty"`
	Error     string   `json:"error,omitempty"`
	StartedAt string   `json:"startedAt,omitempty"`
	StoppedAt string   `json:"stoppedAt,omitempty"`
}

// PathMajorUpgrade: POST a MajorUpgradeRequest to the standby chosen to carry the cluster to the
// new major, once the old primary stopped cleanly, it replayed all of it and holds the primary
// Lease: it upgrades itself in the background (202; 409 ErrWrongRole otherwise). GET answers
// the MajorUpgradeResult (404 before any).
const PathMajorUpgrade = "/v1/major-upgrade"

// MajorUpgradeRequest: the mode (link or copy) and the replication slots the new primary
// creates for the others, as Promote does.
type MajorUpgradeRequest struct {
	Mode  string   `json:"mode"`
	Slots []string `json:"slots,omitempty"`
}

// Steps of an instance's major upgrade.
const (
	UpgradeStepPromoting = "Promoting"
	UpgradeStepUpgrading = "Upgrading"
	// UpgradeStepPointOfNoReturn: the new major's server starts on the upgraded files; from
	// here the upgrade only goes forward.
	UpgradeStepPointOfNoReturn = "PointOfNoReturn"
	// UpgradeStepStarted: the new major's primary accepts writes; statistics and extensions
	// are being brought up to date.
	UpgradeStepStarted = "Started"
	UpgradeStepDone    = "Done"
	// UpgradeStepReverted: the upgrade failed before the point of no return; the instance runs
	// the old major again, as the primary, with nothing lost (Error says what failed).
	UpgradeStepReverted = "Reverted"
	// UpgradeStepFailed: the upgrade failed where no way back was left (Error says why).
	UpgradeStepFailed = "Failed"
)

// MajorUpgradeResult is an instance's major upgrade as its agent knows it.
type MajorUpgradeResult struct {
	From  int    `json:"from"`
	To    int    `json:"to"`
	Mode  string `json:"mode"`
	Step  string `json:"step"`
	Error string `json:"error,omitempty"`
	// PgUpgradeMillis is how long pg_upgrade ran: the part of the time without writes that
	// pgpilot cannot shorten.
	PgUpgradeMillis int64 `json:"pgUpgradeMillis,omitempty"`
	// ExtensionsUpdated lists "name in database to version".
	ExtensionsUpdated []string `json:"extensionsUpdated,omitempty"`
	// BackupLabel is the new major's first full backup, taken once the repository's stanza
	// was upgraded: the other instances are rebuilt from it. BackupError says why there is
	// none (empty with no label: the cluster has no repository).
	BackupLabel string `json:"backupLabel,omitempty"`
	BackupError string `json:"backupError,omitempty"`
	// FollowKit: the instance kept the files the others join it by (PathMajorUpgradeKit);
	// FollowKitError says why not (a copy upgrade, or data the promotion may have changed).
	FollowKit      bool   `json:"followKit,omitempty"`
	FollowKitError string `json:"followKitError,omitempty"`
	StartedAt      string `json:"startedAt,omitempty"`
	StoppedAt      string `json:"stoppedAt,omitempty"`
}

// PathMajorUpgradeKit: GET the follow kit of the instance that upgraded by links, as a tar
// stream: the other instances rebuild on the new major by linking their own relation files
// and writing the kit's (the new catalogs and control files). It is served to the other
// agents, which present the replication user's client certificate (they hold no operator
// certificate), and to the operator; 404 when the instance keeps none.
const PathMajorUpgradeKit = "/v1/major-upgrade/kit"

// PathMajorUpgradeRebuild: POST a MajorUpgradeRebuildRequest to an instance still on the carried
// older major once the primary runs the new one: it rebuilds itself as the new primary's standby
// in the background (202, 200 when it runs; 409 ErrWrongRole on a primary or an instance
// without a carried major). GET answers the MajorUpgradeRebuildResult (404 before any).
const PathMajorUpgradeRebuild = "/v1/major-upgrade/rebuild"

// MajorUpgradeRebuildRequest names the new major's backup to restore by delta; without one (or
// when the delta restore fails) the instance clones the primary in full.
type MajorUpgradeRebuildRequest struct {
	BackupLabel string `json:"backupLabel,omitempty"`
	// Kit, when set, is the new primary's agent serving its follow kit: the instance joins by
	// it first, before a delta restore.
	Kit *FollowKitSource `json:"kit,omitempty"`
}

// FollowKitSource is where an agent fetches a follow kit: the agent API's address and the name
// its certificate is verified for.
type FollowKitSource struct {
	Address    string `json:"address"`
	ServerName string `json:"serverName"`
}

// How an instance was rebuilt on the new major.
const (
	// RebuildLinked: joined by the new primary's follow kit, its own relation files kept.
	RebuildLinked = "link"
	// RebuildDelta: a delta restore of the old directory, which keeps the unchanged files.
	RebuildDelta = "delta"
	// RebuildClone: a full copy of the primary.
	RebuildClone = "clone"
)

// MajorUpgradeRebuildResult is an instance's rebuild as its agent knows it: done once StoppedAt
// is set without Error.
type MajorUpgradeRebuildResult struct {
	Method string `json:"method,omitempty"`
	// Copied and Kept are the bytes a delta restore wrote and kept (a clone copies all).
	Copied int64 `json:"copied,omitempty"`
	Kept   int64 `json:"kept,omitempty"`
	// Reason says why the follow kit or a delta restore was not used.
	Reason    string `json:"reason,omitempty"`
	Error     string `json:"error,omitempty"`
	StartedAt string `json:"startedAt,omitempty"`
	StoppedAt string `json:"stoppedAt,omitempty"`
}
