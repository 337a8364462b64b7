package plugin

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// recentEvents is how many of the cluster's Events status shows, newest last.
const recentEvents = 8

// ClusterView is what `status` shows of a cluster, and what `-o json|yaml` prints: the
// cluster's status, its pods and its recent Events put together, so that a script reads one
// document instead of four.
type ClusterView struct {
	Name            string       `json:"name"`
	Namespace       string       `json:"namespace"`
	Phase           string       `json:"phase"`
	Instances       int32        `json:"desiredInstances"`
	ReadyInstances  int32        `json:"readyInstances"`
	Primary         string       `json:"primary,omitempty"`
	PrimarySince    *metav1.Time `json:"primarySince,omitempty"`
	Timeline        int64        `json:"timeline,omitempty"`
	OperatorVersion string       `json:"operatorVersion,omitempty"`
	PostgresVersion string       `json:"postgresVersion,omitempty"`
	Image           string       `json:"image,omitempty"`
	Synchronous     string       `json:"synchronous,omitempty"`
	InProgress      string       `json:"inProgress,omitempty"`
	// MajorUpgrade is the cluster's major upgrade as its status has it.
	MajorUpgrade *pgv1.MajorUpgradeStatus `json:"majorUpgrade,omitempty"`
	// Roles are the managed roles as the primary last reported them.
	Roles []pgv1.ManagedRoleStatus `json:"roles,omitempty"`
	// Databases are the cluster's Database objects and their state.
	Databases  []DatabaseView  `json:"databases,omitempty"`
	Conditions []ConditionView `json:"conditions,omitempty"`
	Members    []InstanceView  `json:"instances,omitempty"`
	Backup     *BackupView     `json:"backup,omitempty"`
	Events     []EventView     `json:"events,omitempty"`
}

// DatabaseView is one of the cluster's Database objects.
type DatabaseView struct {
	Object   string `json:"object"`
	Database string `json:"database"`
	Owner    string `json:"owner"`
	State    string `json:"state,omitempty"`
	// Extensions are the declared extensions with their installed versions ("pg_trgm 1.6").
	Extensions []string `json:"extensions,omitempty"`
	Message    string   `json:"message,omitempty"`
}

// DatabaseViews are the Databases of cluster among databases, by database name.
func DatabaseViews(cluster string, databases []pgv1.Database) []DatabaseView {
	var views []DatabaseView
	for _, db := range databases {
		if db.Spec.Cluster.Name != cluster {
			continue
		}
		view := DatabaseView{Object: db.Name, Database: db.Spec.Name, Owner: db.Spec.Owner, State: db.Status.State, Message: db.Status.Message}
		for _, ext := range db.Status.Extensions {
			view.Extensions = append(view.Extensions, strings.TrimSpace(ext.Name+" "+ext.Version))
		}
		views = append(views, view)
	}
	slices.SortFunc(views, func(a, b DatabaseView) int { return strings.Compare(a.Database, b.Database) })
	return views
}

// ConditionView is one status condition.
type ConditionView struct {
	Type    string      `json:"type"`
	Status  string      `json:"status"`
	Reason  string      `json:"reason,omitempty"`
	Message string      `json:"message,omitempty"`
	Since   metav1.Time `json:"since"`
}

// InstanceView is one instance: what its agent last reported and where its pod runs.
type InstanceView struct {
	Name           string   `json:"name"`
	Role           string   `json:"role,omitempty"`
	Ready          bool     `json:"ready"`
	Streaming      bool     `json:"streaming,omitempty"`
	Timeline       int64    `json:"timeline,omitempty"`
	LSN            string   `json:"lsn,omitempty"`
	LagBytes       *int64   `json:"lagBytes,omitempty"`
	ReplayLag      string   `json:"replayLag,omitempty"`
	SyncState      string   `json:"syncState,omitempty"`
	PendingRestart []string `json:"pendingRestart,omitempty"`
	Fenced         string   `json:"fenced,omitempty"`
	Error          string   `json:"error,omitempty"`
	Node           string   `json:"node,omitempty"`
	PodPhase       string   `json:"podPhase,omitempty"`
	Restarts       int32    `json:"restarts,omitempty"`
	AgentVersion   string   `json:"agentVersion,omitempty"`
}

// BackupView is the cluster's repository and WAL archiving.
type BackupView struct {
	Archiving                *ConditionView `json:"archiving,omitempty"`
	LastArchivedWAL          string         `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime         *metav1.Time   `json:"lastArchivedTime,omitempty"`
	ArchiveFailures          int64          `json:"archiveFailures,omitempty"`
	Backups                  int32          `json:"backups"`
	LastBackup               string         `json:"lastBackup,omitempty"`
	LastBackupTime           *metav1.Time   `json:"lastBackupTime,omitempty"`
	FirstRecoverabilityPoint *metav1.Time   `json:"firstRecoverabilityPoint,omitempty"`
	WALBytes                 int64          `json:"walBytes,omitempty"`
	VolumeFreeBytes          int64          `json:"volumeFreeBytes,omitempty"`
}

// EventView is one Event about the cluster or one of its objects.
type EventView struct {
	Last    metav1.Time `json:"last"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	Object  string      `json:"object"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
}

// BuildClusterView puts cluster c, its instance pods and the Events of its namespace together;
// Events about other objects than the cluster and its pods are left out.
func BuildClusterView(c *pgv1.PostgresCluster, pods []corev1.Pod, events []corev1.Event) ClusterView {
	v := ClusterView{
		Name: c.Name, Namespace: c.Namespace, Phase: string(c.Status.Phase),
		Instances: c.Spec.Instances, ReadyInstances: c.Status.ReadyInstances,
		Primary: c.Status.CurrentPrimary, PrimarySince: c.Status.CurrentPrimaryTimestamp,
		Timeline: c.Status.Timeline, OperatorVersion: c.Status.OperatorVersion, Image: c.Spec.Image,
		PostgresVersion: c.Status.PostgresVersion,
		InProgress:      inProgress(c.Status), Synchronous: synchronous(c.Spec.PostgreSQL.Synchronous),
		MajorUpgrade: c.Status.MajorUpgrade, Roles: c.Status.Roles,
	}
	for _, cond := range c.Status.Conditions {
		v.Conditions = append(v.Conditions, conditionView(cond))
	}
	v.Members = instanceViews(c.Status.InstancesStatus, pods)
	v.Backup = backupView(c)
	v.Events = eventViews(c, pods, events)
	return v
}

func conditionView(c metav1.Condition) ConditionView {
	return ConditionView{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime}
}

// inProgress says what a running switchover or failover is doing, if one runs.
func inProgress(s pgv1.PostgresClusterStatus) string {
	switch {
	case s.TargetPrimary == "":
		return ""
	case s.FailoverReason != "":
		return "failover to " + s.TargetPrimary + ": " + s.FailoverReason
	case s.SwitchoverReason != "":
		return "switchover to " + s.TargetPrimary + ": " + s.SwitchoverReason
	default:
		return "switchover to " + s.TargetPrimary
	}
}

// synchronous describes spec.synchronous, e.g. "any 1 (dataDurability required)".
func synchronous(s *pgv1.SynchronousSpec) string {
	if s == nil {
		return ""
	}
	d := s.DataDurability
	if d == "" {
		d = "default"
	}
	return fmt.Sprintf("%s %d (dataDurability %s)", s.Method, s.Number, d)
}

// instanceViews joins the agents' reports with the pods, by name; a pod no agent reported on
// yet is listed too, and a report without a pod (being recreated) keeps its row.
func instanceViews(reported []pgv1.InstanceStatus, pods []corev1.Pod) []InstanceView {
	var views []InstanceView
	row := map[string]int{}
	for _, r := range reported {
		row[r.Name] = len(views)
		views = append(views, InstanceView{
			Name: r.Name, Role: r.Role, Ready: r.Ready, Streaming: r.Streaming, Timeline: r.Timeline, LSN: r.LSN,
			LagBytes: r.LagBytes, ReplayLag: r.ReplayLag, SyncState: r.SyncState, PendingRestart: r.PendingRestart, Fenced: r.Fenced, Error: r.Error,
			AgentVersion: r.AgentVersion,
		})
	}
	for _, p := range pods {
		i, ok := row[p.Name]
		if !ok {
			i = len(views)
			views = append(views, InstanceView{Name: p.Name})
		}
		v := &views[i]
		v.Node, v.PodPhase = p.Spec.NodeName, string(p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			v.Restarts += s.RestartCount
		}
	}
	slices.SortFunc(views, func(a, b InstanceView) int { return cmp.Compare(a.Name, b.Name) })
	return views
}

func backupView(c *pgv1.PostgresCluster) *BackupView {
	s := c.Status.Backup
	if c.Spec.Backup == nil && s == nil {
		return nil
	}
	v := &BackupView{}
	if cond := meta.FindStatusCondition(c.Status.Conditions, pgv1.ConditionContinuousArchiving); cond != nil {
		cv := conditionView(*cond)
		v.Archiving = &cv
	}
	if s != nil {
		v.LastArchivedWAL, v.LastArchivedTime, v.ArchiveFailures = s.LastArchivedWAL, s.LastArchivedTime, s.ArchiveFailures
		v.Backups, v.LastBackup, v.LastBackupTime = s.Backups, s.LastBackup, s.LastBackupTime
		v.FirstRecoverabilityPoint, v.WALBytes, v.VolumeFreeBytes = s.FirstRecoverabilityPoint, s.WALBytes, s.VolumeFreeBytes
	}
	return v
}

// eventViews are the newest recentEvents Events about the cluster or its pods, oldest first.
func eventViews(c *pgv1.PostgresCluster, pods []corev1.Pod, events []corev1.Event) []EventView {
	about := map[string]bool{"PostgresCluster/" + c.Name: true}
	for _, p := range pods {
		about["Pod/"+p.Name] = true
	}
	var views []EventView
	for _, e := range events {
		object := e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name
		if !about[object] {
			continue
		}
		views = append(views, EventView{Last: lastSeen(e), Type: e.Type, Reason: e.Reason, Object: object, Message: e.Message, Count: e.Count})
	}
	slices.SortStableFunc(views, func(a, b EventView) int { return a.Last.Compare(b.Last.Time) })
	if len(views) > recentEvents {
		views = views[len(views)-recentEvents:]
	}
	return views
}

// lastSeen is when an Event last happened, whichever API wrote it.
func lastSeen(e corev1.Event) metav1.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return metav1.Time{Time: e.Series.LastObservedTime.Time}
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	default:
		return e.CreationTimestamp
	}
}

// age is how long ago t was, as kubectl prints ages.
func age(now time.Time, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}
