package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// MajorUpgradeStep is where a major upgrade is.
// +kubebuilder:validation:Enum=Preparing;Checking;CheckFailed;Upgrading;RebuildingReplicas;Completed;Reverted;Failed
type MajorUpgradeStep string

// Steps of a major upgrade, in order; CheckFailed, Reverted and Failed end one.
const (
	// MajorUpgradePreparing: the pods move to the new major's image, which runs the old major's
	// server carried out of the old image, one at a time as for any template change.
	MajorUpgradePreparing MajorUpgradeStep = "Preparing"
	// MajorUpgradeChecking: pg_upgrade --check and pgpilot's checks run against a streaming
	// replica; nothing has stopped.
	MajorUpgradeChecking MajorUpgradeStep = "Checking"
	// MajorUpgradeCheckFailed: the checks found problems (status.majorUpgrade.problems); the
	// cluster runs the old major, untouched, and the checks run again every few minutes.
	MajorUpgradeCheckFailed MajorUpgradeStep = "CheckFailed"
	// MajorUpgradeUpgrading: writes stopped, the chosen replica is upgraded and started as the
	// new major's primary.
	MajorUpgradeUpgrading MajorUpgradeStep = "Upgrading"
	// MajorUpgradeRebuildingReplicas: the new primary takes writes; the other instances are
	// rebuilt on the new major, from its first backup where there is one.
	MajorUpgradeRebuildingReplicas MajorUpgradeStep = "RebuildingReplicas"
	// MajorUpgradeCompleted: every instance runs the new major.
	MajorUpgradeCompleted MajorUpgradeStep = "Completed"
	// MajorUpgradeReverted: the upgrade failed before its point of no return and the old major
	// runs again, promoted on the chosen instance; the retry annotation
	// (RetryMajorUpgradeAnnotation) tries again, spec.postgresVersion set back cancels it.
	MajorUpgradeReverted MajorUpgradeStep = "Reverted"
	// MajorUpgradeFailed: the upgrade failed past its point of no return; it only goes forward.
	MajorUpgradeFailed MajorUpgradeStep = "Failed"
)

// MajorUpgradeStatus is a major upgrade as pgpilot runs it.
type MajorUpgradeStatus struct {
	// The major the data was in.
	From int32 `json:"from"`
	// The major it moves to.
	To int32 `json:"to"`

	// link or copy (spec.majorUpgradeMode when the upgrade started).
	// +optional
	Mode MajorUpgradeMode `json:"mode,omitempty"`

	// Where the upgrade is.
	Step MajorUpgradeStep `json:"step"`

	// The instance checked and upgraded: a streaming replica, which becomes the new primary.
	// +optional
	Instance string `json:"instance,omitempty"`

	// What the last check found that must change before the upgrade can run.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Problems []string `json:"problems,omitempty"`

	// The retry annotation's value last acted on.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RetryRequest string `json:"retryRequest,omitempty"`

	// Why the upgrade was reverted or failed, or what it waits for.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Message string `json:"message,omitempty"`

	// When the upgrade started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// When the last check ended.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// When writes stopped: the old primary was shut down cleanly.
	// +optional
	WritesStoppedAt *metav1.Time `json:"writesStoppedAt,omitempty"`
	// When the point of no return was passed: the new major's first start on the upgraded
	// files. Before it, a failure puts the old major back; after it, the upgrade only goes
	// forward.
	// +optional
	PointOfNoReturnAt *metav1.Time `json:"pointOfNoReturnAt,omitempty"`
	// When the new major's primary took writes again.
	// +optional
	WritesResumedAt *metav1.Time `json:"writesResumedAt,omitempty"`
	// When every instance ran the new major.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// How long pg_upgrade ran on the upgraded instance, in milliseconds.
	// +optional
	PgUpgradeMillis int64 `json:"pgUpgradeMillis,omitempty"`

	// How each other instance was rebuilt on the new major.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=9
	// +optional
	Replicas []MajorUpgradeReplica `json:"replicas,omitempty"`
}

// MajorUpgradeReplica is one instance rebuilt on the new major.
type MajorUpgradeReplica struct {
	// The instance's pod.
	Name string `json:"name"`

	// link (joined by the upgraded primary's follow kit: its own relation files linked, only
	// the new catalogs and control files copied, before the primary's first start), delta (a
	// pgBackRest delta restore of its old directory from the new major's first backup, which
	// keeps the unchanged files) or clone (a full copy of the primary).
	// +optional
	Method string `json:"method,omitempty"`

	// Bytes written to the instance's directory.
	// +optional
	BytesCopied int64 `json:"bytesCopied,omitempty"`
	// Bytes of its own files it kept (linked, or found unchanged by a delta restore).
	// +optional
	BytesKept int64 `json:"bytesKept,omitempty"`

	// Why the cheaper methods were not used.
	// +optional
	Reason string `json:"reason,omitempty"`

	// When it started on the new major.
	// +optional
	RebuiltAt *metav1.Time `json:"rebuiltAt,omitempty"`
}

// BeforePointOfNoReturn: the upgrade runs (or stopped) where the cluster can stay on, or go back
// to, the old major: spec.postgresVersion may be set back to cancel it.
func (u *MajorUpgradeStatus) BeforePointOfNoReturn() bool {
	if u == nil {
		return false
	}
	switch u.Step {
	case MajorUpgradePreparing, MajorUpgradeChecking, MajorUpgradeCheckFailed, MajorUpgradeReverted:
		return true
	}
	return false
}

// Ended: nothing of the upgrade runs any more (Completed, or Failed past the point of no
// return); a higher spec.postgresVersion starts the next one.
func (u *MajorUpgradeStatus) Ended() bool {
	return u != nil && (u.Step == MajorUpgradeCompleted || u.Step == MajorUpgradeFailed)
}

// Running: the upgrade moves the cluster on (every step but the ones it stopped at).
func (u *MajorUpgradeStatus) Running() bool {
	return u != nil && !u.Ended() && u.Step != MajorUpgradeCheckFailed && u.Step != MajorUpgradeReverted
}
