package plugin

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// fixture is a 3-instance cluster upgraded from PostgreSQL 15, then failed over: one replica
// streams, one waits for a restart and lags, the old primary's pod restarted and still runs the
// previous release's agent; archiving works, one backup exists.
func fixture() (*pgv1.PostgresCluster, []corev1.Pod, []corev1.Event) {
	c := &pgv1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: pgv1.PostgresClusterSpec{Instances: 3, Image: "ghcr.io/pgpilot/postgresql:17",
			Backup: &pgv1.ClusterBackupSpec{}},
		Status: pgv1.PostgresClusterStatus{
			Phase: pgv1.PhaseReady, Instances: 3, ReadyInstances: 3, CurrentPrimary: "db-1",
			CurrentPrimaryTimestamp: ptr.To(ago(2 * time.Hour)), Timeline: 2, OperatorVersion: "0.3.0", PostgresVersion: "17.12",
			Conditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ClusterReady", Message: "3 of 3 instances ready", LastTransitionTime: ago(90 * time.Minute)},
				{Type: "Degraded", Status: "False", Reason: "Healthy", LastTransitionTime: ago(90 * time.Minute)},
				{Type: "ContinuousArchiving", Status: "True", Reason: "Archiving", Message: "WAL archived 12s ago", LastTransitionTime: ago(2 * time.Hour)},
			},
			InstancesStatus: []pgv1.InstanceStatus{
				{Name: "db-0", Ready: true, Role: "replica", Timeline: 2, LSN: "0/5000060", Streaming: true, LagBytes: ptr.To[int64](0), SyncState: "quorum", RejoinedAt: "x",
					AgentVersion: "0.2.0"},
				{Name: "db-1", Ready: true, Role: "primary", Timeline: 2, LSN: "0/5000060", AgentVersion: "0.3.0"},
				{Name: "db-2", Ready: true, Role: "replica", Timeline: 2, LSN: "0/4FF0000", Streaming: true, LagBytes: ptr.To[int64](3 << 20),
					ReplayLag: "1.25s", SyncState: "quorum", PendingRestart: []string{"shared_buffers"}, AgentVersion: "0.3.0"},
			},
			Backup: &pgv1.ClusterBackupStatus{
				LastArchivedWAL: "000000020000000000000005", LastArchivedTime: ptr.To(ago(12 * time.Second)),
				Backups: 1, LastBackup: "20261202-100000F", LastBackupTime: ptr.To(ago(2 * time.Hour)),
				FirstRecoverabilityPoint: ptr.To(ago(2 * time.Hour)), WALBytes: 48 << 20, VolumeFreeBytes: 900 << 20,
			},
			MajorUpgrade: &pgv1.MajorUpgradeStatus{From: 15, To: 17, Mode: pgv1.MajorUpgradeLink, Step: pgv1.MajorUpgradeCompleted,
				Instance: "db-0", PointOfNoReturnAt: ptr.To(ago(3 * time.Hour)), Replicas: []pgv1.MajorUpgradeReplica{
					{Name: "db-1", Method: "delta", BytesCopied: 31 << 20, BytesKept: 402 << 20},
					{Name: "db-2", Method: "clone", BytesCopied: 433 << 20, Reason: "the new major has no backup to restore from"}}},
			Roles: []pgv1.ManagedRoleStatus{{Name: "reader", State: "Drift", Changed: []string{"login"}},
				{Name: "writer", State: "Applied", Message: `Secret "writer-pw" does not exist: the role keeps the password it has`},
				{Name: "old", State: "Error", Changed: []string{"dropped"}, Message: `role "old" cannot be dropped because some objects depend on it`}},
		},
	}
	c.Spec.PostgreSQL.Synchronous = &pgv1.SynchronousSpec{Method: "any", Number: 1, DataDurability: "required"}
	pods := []corev1.Pod{
		testPod("db-2", "node-b", 0), testPod("db-0", "node-a", 1), testPod("db-1", "node-b", 0),
	}
	events := []corev1.Event{
		testEvent("PostgresCluster", "db", "Normal", "FailoverCompleted", "db-1 is the primary on timeline 2", ago(2*time.Hour)),
		testEvent("Pod", "db-0", "Warning", "Rejoined", "db-0 rewound and follows db-1", ago(110*time.Minute)),
		testEvent("PostgresCluster", "other", "Normal", "Ignored", "another cluster's", ago(time.Minute)),
		testEvent("PostgresCluster", "db", "Normal", "BackupCompleted", "20261202-100000F", ago(100*time.Minute)),
	}
	return c, pods, events
}

// fixtureView is the fixture's view with its Databases (one of another cluster).
func fixtureView(c *pgv1.PostgresCluster, pods []corev1.Pod, events []corev1.Event) ClusterView {
	view := BuildClusterView(c, pods, events)
	database := func(object, name, cluster, state, message string, extensions ...pgv1.DatabaseItemStatus) pgv1.Database {
		return pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: object},
			Spec:   pgv1.DatabaseSpec{Cluster: corev1.LocalObjectReference{Name: cluster}, Name: name, Owner: "shop"},
			Status: pgv1.DatabaseStatus{State: state, Message: message, Extensions: extensions}}
	}
	view.Databases = DatabaseViews(c.Name, []pgv1.Database{
		database("shop-db", "shop", c.Name, "Applied", "", pgv1.DatabaseItemStatus{Name: "pg_trgm", Version: "1.6"}, pgv1.DatabaseItemStatus{Name: "hstore", Version: "1.8"}),
		database("geo", "geo", c.Name, "Error", "extension postgis: the image does not ship extension postgis", pgv1.DatabaseItemStatus{Name: "postgis"}),
		database("elsewhere", "elsewhere", "other", "Applied", ""),
	})
	return view
}

func TestRenderStatusPlainMatchesGolden(t *testing.T) {
	c, pods, events := fixture()
	var out bytes.Buffer
	if err := RenderStatus(&out, fixtureView(c, pods, events), now, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.txt", out.Bytes())
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("plain output has colour codes")
	}
}

func TestRenderStatusJSONMatchesGolden(t *testing.T) {
	c, pods, events := fixture()
	var out bytes.Buffer
	if err := writeView(&out, fixtureView(c, pods, events), "json", false, &session{now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json", out.Bytes())
}

func TestRenderStatusColourKeepsColumnsAligned(t *testing.T) {
	c, pods, events := fixture()
	var plain, coloured bytes.Buffer
	view := fixtureView(c, pods, events)
	_ = RenderStatus(&plain, view, now, false)
	_ = RenderStatus(&coloured, view, now, true)
	if !strings.Contains(coloured.String(), string(green)+"streaming"+reset) {
		t.Errorf("a streaming replica is not green:\n%s", coloured.String())
	}
	stripped := regexpANSI.ReplaceAllString(coloured.String(), "")
	if diff := cmp.Diff(plain.String(), stripped); diff != "" {
		t.Errorf("coloured output without its colours differs from the plain one (-plain +coloured):\n%s", diff)
	}
}

func TestBuildClusterViewListsAPodNoAgentReportedOn(t *testing.T) {
	c, pods, _ := fixture()
	c.Status.InstancesStatus = c.Status.InstancesStatus[:1]
	view := BuildClusterView(c, pods, nil)
	var names []string
	for _, m := range view.Members {
		names = append(names, m.Name)
	}
	if diff := cmp.Diff([]string{"db-0", "db-1", "db-2"}, names); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	if view.Members[1].Node != "node-b" || view.Members[1].Role != "" {
		t.Errorf("db-1 without a report: %+v", view.Members[1])
	}
}

func TestBuildClusterViewKeepsTheNewestEvents(t *testing.T) {
	c, pods, _ := fixture()
	var events []corev1.Event
	for i := range 12 {
		events = append(events, testEvent("PostgresCluster", "db", "Normal", "Step", strings.Repeat("x", i), ago(time.Duration(12-i)*time.Minute)))
	}
	view := BuildClusterView(c, pods, events)
	if len(view.Events) != recentEvents || view.Events[recentEvents-1].Message != strings.Repeat("x", 11) {
		t.Errorf("events: %+v", view.Events)
	}
}

var regexpANSI = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func testPod(name, node string, restarts int32) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres", RestartCount: restarts}}},
	}
}

func testEvent(kind, name, eventType, reason, message string, at metav1.Time) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + "." + reason, Namespace: "shop"},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name},
		Type:           eventType, Reason: reason, Message: message, LastTimestamp: at, Count: 1,
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./internal/plugin -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-golden +got; go test ./internal/plugin -update rewrites it):\n%s", name, diff)
	}
}
