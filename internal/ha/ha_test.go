package ha

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func testPod(name string, ready bool) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

func testCluster(instances int32) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}}
	c.Spec.Instances = instances
	return c
}

func replica(received, replayed string, streaming bool) *agentapi.Status {
	return &agentapi.Status{Role: agentapi.RoleReplica, ReceiveLSN: received, ReplayLSN: replayed, Streaming: streaming}
}

func TestChooseCandidate(t *testing.T) {
	pods := []corev1.Pod{testPod("db-0", false), testPod("db-1", true),
		testPod("db-2", true), testPod("db-10", true)}
	deleting := testPod("db-2", true)
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
			if got := ChooseCandidate(&Observed{Pods: tc.pods, Reports: tc.reports}, "db-0"); got != tc.want {
				t.Errorf("candidate %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrimaryProblem(t *testing.T) {
	ready, unready := testPod("db-0", true), testPod("db-0", false)
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
		{"a ready pod's agent silent for less than the limit", &ready, nil, AgentSilenceLimit - time.Second, false},
		{"a ready pod's agent silent for the limit: its node may be lost", &ready, nil, AgentSilenceLimit, true},
		{"unready and silent", &unready, nil, 0, true},
		{"gone", nil, nil, 0, true},
		{"being deleted", deleting, primary, 0, true},
		{"fenced", &ready, &agentapi.Status{Fenced: true, FencedReason: "postgres exited"}, 0, true},
		{"frozen: its agent answers, its PostgreSQL does not", &ready,
			&agentapi.Status{Role: agentapi.RolePrimary, Unresponsive: "no answer for 5s"}, 0, true},
		{"running as a standby", &ready, replica("0/1", "0/1", true), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Observed{Reports: map[string]*agentapi.Status{}, Failures: map[string]string{"db-0": "timeout"}}
			if tc.pod != nil {
				o.Pods = []corev1.Pod{*tc.pod}
			}
			if tc.report != nil {
				o.Reports["db-0"] = tc.report
			}
			if got := PrimaryProblem(o, "db-0", tc.silentFor); (got != "") != tc.failed {
				t.Errorf("problem %q, want failed=%v", got, tc.failed)
			}
		})
	}
}

// In required mode a commit is on n of the N-1 standbys: N-n answering replicas must be seen.
func TestQuorumShortfall(t *testing.T) {
	answering := func(names ...string) *Observed {
		o := &Observed{Reports: map[string]*agentapi.Status{"db-0": {Fenced: true}}}
		for _, name := range names {
			o.Reports[name] = replica("0/1", "0/1", false)
		}
		return o
	}
	for _, tc := range []struct {
		name      string
		instances int32
		sync      *pgv1.SynchronousSpec
		o         *Observed
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
			if got := QuorumShortfall(c, tc.o, "db-0"); got != tc.shortfall {
				t.Errorf("shortfall %d, want %d", got, tc.shortfall)
			}
		})
	}
}

// Only an instance that replayed the old primary's WAL to its end may be promoted instead: the
// old primary itself when no replica has, and none, waiting, when not even it has.
func TestSwitchoverFallback(t *testing.T) {
	replica := func(replayed string) *agentapi.Status {
		return &agentapi.Status{Role: agentapi.RoleReplica, ReplayLSN: replayed}
	}
	for _, tc := range []struct {
		name    string
		reports map[string]*agentapi.Status
		want    string
	}{
		{"another replica first", map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": replica("0/30000F0"), "db-2": replica("0/3000108")}, "db-2"},
		{"the furthest replica", map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": replica("0/30000F0"), "db-2": replica("0/3000108"), "db-3": replica("0/3000200")}, "db-3"},
		{"the old primary when no replica has it all", map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": replica("0/30000F0"), "db-2": replica("0/3000000")}, "db-0"},
		{"none when not even the old primary has", map[string]*agentapi.Status{"db-0": replica("0/3000000"), "db-1": replica("0/30000F0")}, ""},
		{"never a primary", map[string]*agentapi.Status{"db-0": replica("0/3000000"), "db-2": {Role: agentapi.RolePrimary, ReplayLSN: "0/3000200"}}, ""},
	} {
		o := &Observed{Reports: tc.reports}
		for name := range tc.reports {
			o.Pods = append(o.Pods, testPod(name, true))
		}
		if got := SwitchoverFallback(o, "db-0", "db-1", "0/3000100"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseLSN(t *testing.T) {
	for lsn, want := range map[string]uint64{"0/3000060": 0x3000060, "1/0": 1 << 32, "A/FF": 0xA<<32 | 0xFF} {
		if got, ok := ParseLSN(lsn); !ok || got != want {
			t.Errorf("ParseLSN(%q) = %x, %v", lsn, got, ok)
		}
	}
	for _, bad := range []string{"", "3000060", "x/1"} {
		if _, ok := ParseLSN(bad); ok {
			t.Errorf("ParseLSN(%q) accepted", bad)
		}
	}
	for _, lsn := range []string{"0/3000060", "1/0", "A/FF", "FFFFFFFF/FFFFFFFF"} {
		if parsed, _ := ParseLSN(lsn); FormatLSN(parsed) != lsn {
			t.Errorf("FormatLSN(ParseLSN(%q)) = %q", lsn, FormatLSN(parsed))
		}
	}
}
