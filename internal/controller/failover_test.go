package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

func replica(received, replayed string, streaming bool) *agentapi.Status {
	return &agentapi.Status{Role: agentapi.RoleReplica, ReceiveLSN: received, ReplayLSN: replayed, Streaming: streaming}
}

func TestChooseCandidate(t *testing.T) {
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RolePrimary, false), testPod("db-1", pgbuilder.RoleReplica, true),
		testPod("db-2", pgbuilder.RoleReplica, true), testPod("db-10", pgbuilder.RoleReplica, true)}
	deleting := testPod("db-2", pgbuilder.RoleReplica, true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name    string
		reports map[string]*agentapi.Status
		pods    []corev1.Pod
		want    string
	}{
		{"most received WAL wins", map[string]*agentapi.Status{
			"db-1": replica("0/5000000", "0/4000000", false), "db-2": replica("0/6000000", "0/3000000", false)}, pods, "db-2"},
		{"then most replayed", map[string]*agentapi.Status{
			"db-1": replica("0/6000000", "0/4000000", false), "db-2": replica("0/6000000", "0/5000000", false)}, pods, "db-2"},
		{"then the lowest ordinal", map[string]*agentapi.Status{
			"db-10": replica("0/6000000", "0/5000000", false), "db-2": replica("0/6000000", "0/5000000", false)}, pods, "db-2"},
		{"a replica that received nothing yet counts its replay", map[string]*agentapi.Status{
			"db-1": replica("", "0/7000000", false), "db-2": replica("0/6000000", "0/6000000", false)}, pods, "db-1"},
		{"never the primary nor a fenced or deleting instance", map[string]*agentapi.Status{
			"db-0": {Role: agentapi.RolePrimary, CurrentLSN: "0/9000000"}, "db-1": {Fenced: true},
			"db-2": replica("0/6000000", "0/6000000", false)},
			[]corev1.Pod{pods[0], pods[1], deleting}, ""},
		{"none answers", map[string]*agentapi.Status{}, pods, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseCandidate(&observed{pods: tc.pods, reports: tc.reports}, "db-0"); got != tc.want {
				t.Errorf("candidate %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrimaryProblem(t *testing.T) {
	ready, unready := testPod("db-0", pgbuilder.RolePrimary, true), testPod("db-0", pgbuilder.RolePrimary, false)
	deleting := ready.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	primary := &agentapi.Status{Role: agentapi.RolePrimary}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		report    *agentapi.Status
		silentFor time.Duration
		failed    bool
	}{
		{"healthy", &ready, primary, 0, false},
		{"one slow answer from a ready pod is no failure", &ready, nil, 0, false},
		{"a ready pod's agent silent for less than the limit", &ready, nil, agentSilenceLimit - time.Second, false},
		{"a ready pod's agent silent for the limit: its node may be lost", &ready, nil, agentSilenceLimit, true},
		{"unready and silent", &unready, nil, 0, true},
		{"gone", nil, nil, 0, true},
		{"being deleted", deleting, primary, 0, true},
		{"fenced", &ready, &agentapi.Status{Fenced: true, FencedReason: "postgres exited"}, 0, true},
		{"frozen: its agent answers, its PostgreSQL does not", &ready,
			&agentapi.Status{Role: agentapi.RolePrimary, Unresponsive: "no answer for 5s"}, 0, true},
		{"running as a standby", &ready, replica("0/1", "0/1", true), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &observed{reports: map[string]*agentapi.Status{}, failures: map[string]string{"db-0": "timeout"}}
			if tc.pod != nil {
				o.pods = []corev1.Pod{*tc.pod}
			}
			if tc.report != nil {
				o.reports["db-0"] = tc.report
			}
			if got := primaryProblem(o, "db-0", tc.silentFor); (got != "") != tc.failed {
				t.Errorf("problem %q, want failed=%v", got, tc.failed)
			}
		})
	}
}

// An unreachable holder counts as fenced only once this process watched its Lease stay
// unrenewed for LeaseExpiry and no standby stream for PeersGoneWait after that.
func TestLeaseLapse(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	uid, start := types.UID("c"), time.Now()
	tracker.observe(uid, "1", start)
	if lapsed, _ := tracker.leaseLapsed(uid, false, start.Add(agentapi.LeaseExpiry-time.Second)); lapsed {
		t.Fatal("lapsed before LeaseExpiry")
	}
	tracker.observe(uid, "2", start.Add(10*time.Second)) // renewed: the clock starts again
	at := start.Add(10*time.Second + agentapi.LeaseExpiry)
	if lapsed, why := tracker.leaseLapsed(uid, true, at); lapsed {
		t.Fatalf("lapsed while a standby streams: %s", why)
	}
	if lapsed, _ := tracker.leaseLapsed(uid, false, at); lapsed {
		t.Fatal("lapsed the moment the standbys stopped streaming")
	}
	if lapsed, why := tracker.leaseLapsed(uid, false, at.Add(agentapi.PeersGoneWait)); !lapsed {
		t.Fatalf("not lapsed after PeersGoneWait: %s", why)
	}
	// The timing argument: the agent fences itself before the operator may promote.
	if agentapi.LeaseExpiry <= agentapi.LeaseFenceAfter+agentapi.LeaseRequestTimeout+2*time.Second ||
		agentapi.PeersGoneWait <= agentapi.PeerWindow+2*time.Second {
		t.Error("the operator's waits do not cover the agent's fencing bound")
	}
}

// In required mode a commit is on n of the N-1 standbys: N-n answering replicas must be seen.
func TestQuorumShortfall(t *testing.T) {
	answering := func(names ...string) *observed {
		o := &observed{reports: map[string]*agentapi.Status{"db-0": {Fenced: true}}}
		for _, name := range names {
			o.reports[name] = replica("0/1", "0/1", false)
		}
		return o
	}
	for _, tc := range []struct {
		name      string
		instances int32
		sync      *pgv1.SynchronousSpec
		o         *observed
		shortfall int
	}{
		{"asynchronous: no quorum", 3, nil, answering(), 0},
		{"preferred: no quorum", 3, &pgv1.SynchronousSpec{Number: 1, DataDurability: pgv1.DurabilityPreferred}, answering(), 0},
		{"ANY 1 of 2 standbys: both must answer", 3, &pgv1.SynchronousSpec{Number: 1, DataDurability: pgv1.DurabilityRequired}, answering("db-1"), 1},
		{"ANY 1 of 2 standbys, both answer", 3, &pgv1.SynchronousSpec{Number: 1, DataDurability: pgv1.DurabilityRequired}, answering("db-1", "db-2"), 0},
		{"ANY 2 of 4 standbys: three suffice", 5, &pgv1.SynchronousSpec{Number: 2, DataDurability: pgv1.DurabilityRequired}, answering("db-1", "db-2", "db-4"), 0},
		{"ANY 2 of 4 standbys: two do not", 5, &pgv1.SynchronousSpec{Number: 2, DataDurability: pgv1.DurabilityRequired}, answering("db-1", "db-2"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster(tc.instances)
			c.Spec.PostgreSQL.Synchronous = tc.sync
			if got := quorumShortfall(c, tc.o, "db-0"); got != tc.shortfall {
				t.Errorf("shortfall %d, want %d", got, tc.shortfall)
			}
		})
	}
}

// The watchdog wakes a cluster once per Lease version that stays unrenewed, and never one
// whose Lease nobody holds.
func TestStaleLeaseAlarm(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	held, released := types.NamespacedName{Namespace: "ns", Name: "held"}, types.NamespacedName{Namespace: "ns", Name: "released"}
	start := time.Now()
	tracker.watched("a", held, "1", "db-0", start)
	tracker.watched("b", released, "7", "", start)
	if got := tracker.stale(leaseAlarmAfter, start.Add(leaseAlarmAfter-time.Second)); len(got) != 0 {
		t.Fatalf("alarm before leaseAlarmAfter: %v", got)
	}
	if got := tracker.stale(leaseAlarmAfter, start.Add(leaseAlarmAfter)); len(got) != 1 || got[0] != held {
		t.Fatalf("alarms %v, want [%v]", got, held)
	}
	if got := tracker.stale(leaseAlarmAfter, start.Add(2*leaseAlarmAfter)); len(got) != 0 {
		t.Fatalf("a second alarm for the same version: %v", got)
	}
	tracker.watched("a", held, "2", "db-0", start.Add(2*leaseAlarmAfter)) // renewed: armed again
	if got := tracker.stale(leaseAlarmAfter, start.Add(3*leaseAlarmAfter)); len(got) != 1 {
		t.Fatalf("no alarm after the renewal went stale: %v", got)
	}
	if unchanged, seen := tracker.unchangedFor("a", start.Add(3*leaseAlarmAfter)); !seen || unchanged != leaseAlarmAfter {
		t.Fatalf("unchangedFor %s %v", unchanged, seen)
	}
}

// Only an agent heard before can fall silent: a primary of an old release without an agent,
// or one this process never heard, is not failed over for its silence.
func TestHeardFrom(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	if tracker.heardFrom("c", "db-0", false) {
		t.Fatal("heard from an agent that never answered")
	}
	if !tracker.heardFrom("c", "db-0", true) || !tracker.heardFrom("c", "db-0", false) {
		t.Fatal("an agent that answered once was not heard")
	}
	if tracker.heardFrom("c", "db-1", false) {
		t.Fatal("heard from a new primary that never answered")
	}
}
