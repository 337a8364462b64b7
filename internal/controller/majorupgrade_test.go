package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// fakeUpgradeAgents answers the major upgrade's requests by pod name and records them.
type fakeUpgradeAgents struct {
	checks   map[string]*agentapi.MajorUpgradeCheckResult
	upgrades map[string]*agentapi.MajorUpgradeResult
	rebuilds map[string]*agentapi.MajorUpgradeRebuildResult
	asked    []string
}

func newFakeUpgradeAgents() *fakeUpgradeAgents {
	return &fakeUpgradeAgents{checks: map[string]*agentapi.MajorUpgradeCheckResult{},
		upgrades: map[string]*agentapi.MajorUpgradeResult{}, rebuilds: map[string]*agentapi.MajorUpgradeRebuildResult{}}
}

func (f *fakeUpgradeAgents) StartMajorUpgradeCheck(_ context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeCheckRequest) (*agentapi.MajorUpgradeCheckResult, error) {
	f.asked = append(f.asked, "check "+e.Address+" "+req.Mode)
	f.checks[e.Address] = &agentapi.MajorUpgradeCheckResult{From: 15, To: 17, Mode: req.Mode, Phase: agentapi.UpgradeCheckRunning, StartedAt: rfc3339(time.Now())}
	return f.checks[e.Address], nil
}

func (f *fakeUpgradeAgents) MajorUpgradeCheck(_ context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeCheckResult, error) {
	return f.checks[e.Address], nil
}

func (f *fakeUpgradeAgents) StartMajorUpgrade(_ context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRequest) (*agentapi.MajorUpgradeResult, error) {
	f.asked = append(f.asked, "upgrade "+e.Address+" "+strings.Join(req.Slots, ","))
	f.upgrades[e.Address] = &agentapi.MajorUpgradeResult{From: 15, To: 17, Mode: req.Mode, Step: agentapi.UpgradeStepPromoting, StartedAt: rfc3339(time.Now())}
	return f.upgrades[e.Address], nil
}

func (f *fakeUpgradeAgents) MajorUpgrade(_ context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeResult, error) {
	return f.upgrades[e.Address], nil
}

func (f *fakeUpgradeAgents) StartMajorUpgradeRebuild(_ context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRebuildRequest) (*agentapi.MajorUpgradeRebuildResult, error) {
	asked := "rebuild " + e.Address + " " + req.BackupLabel
	if req.Kit != nil {
		asked += " kit from " + req.Kit.Address
	}
	f.asked = append(f.asked, asked)
	f.rebuilds[e.Address] = &agentapi.MajorUpgradeRebuildResult{StartedAt: rfc3339(time.Now())}
	return f.rebuilds[e.Address], nil
}

func (f *fakeUpgradeAgents) MajorUpgradeRebuild(_ context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeRebuildResult, error) {
	return f.rebuilds[e.Address], nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// upgradePods are three ready instance pods, db-0 the primary, running image, with an older
// server carried in or not.
func upgradePods(image string, carried bool) []corev1.Pod {
	var pods []corev1.Pod
	for i, name := range []string{"db-0", "db-1", "db-2"} {
		role := pgbuilder.RoleReplica
		if i == 0 {
			role = pgbuilder.RolePrimary
		}
		pod := testPod(name, role, true)
		pod.Spec.Containers = []corev1.Container{{Name: pgbuilder.PostgresContainerName, Image: image}}
		pod.Spec.InitContainers = []corev1.Container{{Name: "install-agent"}}
		if carried {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: pgbuilder.CarryContainerName})
		}
		pods = append(pods, pod)
	}
	return pods
}

// upgradeReports: db-0 the primary, db-1 and db-2 streaming replicas (db-1 ahead), all of major.
func upgradeReports(version string) map[string]*agentapi.Status {
	reports := map[string]*agentapi.Status{
		"db-0": {Role: agentapi.RolePrimary, Timeline: 1},
		"db-1": replica("0/3000100", "0/3000100", true),
		"db-2": replica("0/3000000", "0/3000000", true),
	}
	for _, r := range reports {
		r.ServerVersion = version
	}
	return reports
}

// runMajorUpgradeStage runs the major upgrade stage once and keeps what it decided in the status.
func runMajorUpgradeStage(t *testing.T, r *PostgresClusterReconciler, cluster *pgv1.PostgresCluster, pods []corev1.Pod, reports map[string]*agentapi.Status) *stop {
	t.Helper()
	s := newScope(cluster)
	s.primary = cluster.Status.CurrentPrimary
	s.statefulSet = &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3}}
	s.observed = &observed{Observed: ha.Observed{Pods: pods, Reports: reports, Failures: map[string]string{}}}
	st, err := r.advanceMajorUpgrade(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.TargetPrimary, cluster.Status.SwitchoverReason = s.targetPrimary, s.switchoverReason
	if s.postgresMajor != 0 {
		cluster.Status.PostgresMajor = s.postgresMajor
	}
	setMajorUpgrade(&cluster.Status, s.majorUpgrade, cluster.Generation)
	return st
}

func expectStep(t *testing.T, cluster *pgv1.PostgresCluster, want pgv1.MajorUpgradeStep) {
	t.Helper()
	if up := cluster.Status.MajorUpgrade; up == nil || up.Step != want {
		t.Fatalf("major upgrade = %+v, want step %s", up, want)
	}
}

func expectAsked(t *testing.T, agents *fakeUpgradeAgents, want ...string) {
	t.Helper()
	if !slices.Equal(agents.asked, want) {
		t.Fatalf("agents were asked %q, want %q", agents.asked, want)
	}
	agents.asked = nil
}

func upgradeReconciler() (*PostgresClusterReconciler, *fakeUpgradeAgents) {
	agents := newFakeUpgradeAgents()
	return &PostgresClusterReconciler{UpgradeAgents: agents, AgentAddress: func(p *corev1.Pod) string { return p.Name },
		PostgresImages: map[int32]string{15: "pg:15", 17: "pg:17"}}, agents
}

func upgradingCluster() *pgv1.PostgresCluster {
	cluster := testCluster(3)
	cluster.Spec.PostgresVersion = 17
	cluster.Status.PostgresMajor, cluster.Status.CurrentPrimary = 15, "db-0"
	return cluster
}

// The steps before the point of no return: the pods move to the new image, the check runs on
// the replica with the most WAL, a failed check holds the upgrade (each problem in the
// condition) and runs again later, a passed one starts the switchover that upgrades it.
func TestMajorUpgradeUpToTheSwitchover(t *testing.T) {
	r, agents := upgradeReconciler()
	cluster := upgradingCluster()
	reports := upgradeReports("15.14")

	if st := runMajorUpgradeStage(t, r, cluster, upgradePods("pg:15", false), reports); st != nil {
		t.Fatalf("preparing must not hold the follow lane, which rolls the pods: %+v", st)
	}
	expectStep(t, cluster, pgv1.MajorUpgradePreparing)
	if up := cluster.Status.MajorUpgrade; up.From != 15 || up.To != 17 || up.Mode != pgv1.MajorUpgradeLink || up.StartedAt == nil {
		t.Fatalf("started = %+v", up)
	}
	runMajorUpgradeStage(t, r, cluster, upgradePods("pg:17", false), reports)
	expectStep(t, cluster, pgv1.MajorUpgradePreparing)
	runMajorUpgradeStage(t, r, cluster, upgradePods("pg:17", true), reports)
	expectStep(t, cluster, pgv1.MajorUpgradeChecking)
	expectAsked(t, agents)

	pods := upgradePods("pg:17", true)
	runMajorUpgradeStage(t, r, cluster, pods, reports)
	expectAsked(t, agents, "check db-1 link")
	if st := runMajorUpgradeStage(t, r, cluster, pods, reports); st == nil || !st.retry {
		t.Fatalf("a running check looks again soon: %+v", st)
	}
	expectAsked(t, agents)

	check := agents.checks["db-1"]
	check.Phase, check.StoppedAt = agentapi.UpgradeCheckFailed, rfc3339(time.Now())
	check.Problems = []string{"a reg* column: public.t.c", "extension pg_partman is not in the new image"}
	runMajorUpgradeStage(t, r, cluster, pods, reports)
	expectStep(t, cluster, pgv1.MajorUpgradeCheckFailed)
	condition := meta.FindStatusCondition(cluster.Status.Conditions, pgv1.ConditionMajorUpgrade)
	if condition == nil || condition.Status != metav1.ConditionFalse || !strings.Contains(condition.Message, "public.t.c") ||
		!strings.Contains(condition.Message, "pg_partman") || cluster.Status.TargetPrimary != "" {
		t.Fatalf("a failed check: condition %+v, target %q", condition, cluster.Status.TargetPrimary)
	}
	runMajorUpgradeStage(t, r, cluster, pods, reports)
	expectAsked(t, agents) // not again at once

	check.StoppedAt = rfc3339(time.Now().Add(-majorUpgradeRecheck))
	runMajorUpgradeStage(t, r, cluster, pods, reports)
	expectAsked(t, agents, "check db-1 link")
	agents.checks["db-1"].Phase, agents.checks["db-1"].StoppedAt = agentapi.UpgradeCheckPassed, rfc3339(time.Now())
	st := runMajorUpgradeStage(t, r, cluster, pods, reports)
	expectStep(t, cluster, pgv1.MajorUpgradeUpgrading)
	if st == nil || cluster.Status.TargetPrimary != "db-1" || cluster.Status.SwitchoverReason != SwitchoverForMajorUpgrade {
		t.Fatalf("a passed check starts the switchover to db-1: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if cluster.Status.MajorUpgrade.Problems != nil || cluster.Status.PostgresMajor != 15 {
		t.Fatalf("after the check: %+v, data major %d", cluster.Status.MajorUpgrade, cluster.Status.PostgresMajor)
	}
}

// Set back to the data's major before the point of no return, the upgrade is cancelled; a
// reverted one stays reverted until then, not retried in a loop.
func TestMajorUpgradeCancelledAndReverted(t *testing.T) {
	for _, step := range []pgv1.MajorUpgradeStep{pgv1.MajorUpgradePreparing, pgv1.MajorUpgradeCheckFailed, pgv1.MajorUpgradeReverted} {
		t.Run(string(step), func(t *testing.T) {
			r, agents := upgradeReconciler()
			cluster := upgradingCluster()
			cluster.Status.MajorUpgrade = &pgv1.MajorUpgradeStatus{From: 15, To: 17, Mode: pgv1.MajorUpgradeLink, Step: step}
			runMajorUpgradeStage(t, r, cluster, upgradePods("pg:17", true), upgradeReports("15.14"))
			if step == pgv1.MajorUpgradeReverted {
				expectStep(t, cluster, pgv1.MajorUpgradeReverted)
				expectAsked(t, agents)
			}
			cluster.Spec.PostgresVersion = 15
			runMajorUpgradeStage(t, r, cluster, upgradePods("pg:17", true), upgradeReports("15.14"))
			if cluster.Status.MajorUpgrade != nil || meta.FindStatusCondition(cluster.Status.Conditions, pgv1.ConditionMajorUpgrade) != nil {
				t.Fatalf("cancelled: %+v %+v", cluster.Status.MajorUpgrade, cluster.Status.Conditions)
			}
		})
	}
}

// The switchover's last step asks the target to upgrade itself, and ends only once the agent
// says its server runs again: the promotion on the old major before pg_upgrade does not end it.
func TestMajorUpgradeSwitchoverStep(t *testing.T) {
	r, agents := upgradeReconciler()
	cluster := upgradingCluster()
	checked := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	s := newScope(cluster)
	s.majorUpgrade = &pgv1.MajorUpgradeStatus{From: 15, To: 17, Mode: pgv1.MajorUpgradeCopy, Step: pgv1.MajorUpgradeUpgrading, CheckedAt: &checked}
	pods := upgradePods("pg:17", true)
	s.observed = &observed{Observed: ha.Observed{Pods: pods, Reports: upgradeReports("15.14")}}
	target := &pods[1]
	// An upgrade the agent remembers from before this one's check is not this one.
	agents.upgrades["db-1"] = &agentapi.MajorUpgradeResult{To: 17, Step: agentapi.UpgradeStepReverted, StartedAt: rfc3339(checked.Add(-time.Hour)), StoppedAt: rfc3339(checked.Add(-time.Hour))}
	for range 2 {
		if st, err := r.upgradeTarget(context.Background(), s, target); err != nil || st == nil {
			t.Fatalf("upgradeTarget = %+v, %v", st, err)
		}
	}
	expectAsked(t, agents, "upgrade db-1 "+agentapi.SlotName("db-0")+","+agentapi.SlotName("db-2"))
	for _, tc := range []struct {
		step, stopped string
		opened        bool
	}{
		{step: agentapi.UpgradeStepPromoting},
		{step: agentapi.UpgradeStepUpgrading},
		{step: agentapi.UpgradeStepPointOfNoReturn},
		{step: agentapi.UpgradeStepStarted, opened: true},
		{step: agentapi.UpgradeStepReverted},
		{step: agentapi.UpgradeStepReverted, stopped: rfc3339(time.Now()), opened: true},
		{step: agentapi.UpgradeStepFailed, stopped: rfc3339(time.Now()), opened: true},
	} {
		agents.upgrades["db-1"].Step, agents.upgrades["db-1"].StoppedAt = tc.step, tc.stopped
		if opened, err := r.upgradeOpened(context.Background(), s, target); err != nil || opened != tc.opened {
			t.Errorf("step %s: opened = %v (%v), want %v", tc.step, opened, err, tc.opened)
		}
	}
	// An agent that restarted mid-way knows no upgrade: the server it runs as the primary (the
	// old major put back, or the new one) ends the switchover.
	delete(agents.upgrades, "db-1")
	if opened, err := r.upgradeOpened(context.Background(), s, target); err != nil || !opened {
		t.Errorf("after the agent restarted: opened = %v (%v)", opened, err)
	}
}

// After the switchover: the new major's primary is the point of no return, then the others are
// rebuilt from the new major's first backup; the old major back is a revert.
func TestMajorUpgradeAfterTheSwitchover(t *testing.T) {
	upgraded := func() (*PostgresClusterReconciler, *fakeUpgradeAgents, *pgv1.PostgresCluster) {
		r, agents := upgradeReconciler()
		cluster := upgradingCluster()
		cluster.Spec.Backup = &pgv1.ClusterBackupSpec{}
		cluster.Status.CurrentPrimary = "db-1"
		cluster.Status.MajorUpgrade = &pgv1.MajorUpgradeStatus{From: 15, To: 17, Mode: pgv1.MajorUpgradeLink, Step: pgv1.MajorUpgradeUpgrading, Instance: "db-1"}
		agents.upgrades["db-1"] = &agentapi.MajorUpgradeResult{To: 17, Step: agentapi.UpgradeStepStarted, StartedAt: rfc3339(time.Now()), PgUpgradeMillis: 2100}
		return r, agents, cluster
	}
	reports := func(primary string, replicas string) map[string]*agentapi.Status {
		rs := upgradeReports(replicas)
		rs["db-0"], rs["db-1"] = replica("0/3000100", "0/3000100", false), &agentapi.Status{Role: agentapi.RolePrimary, ServerVersion: primary}
		rs["db-0"].ServerVersion, rs["db-2"].Streaming = replicas, false
		return rs
	}
	pods := upgradePods("pg:17", true)

	t.Run("reverted", func(t *testing.T) {
		r, agents, cluster := upgraded()
		agents.upgrades["db-1"].Step, agents.upgrades["db-1"].Error = agentapi.UpgradeStepReverted, "pg_upgrade: killed"
		runMajorUpgradeStage(t, r, cluster, pods, reports("15.14", "15.14"))
		expectStep(t, cluster, pgv1.MajorUpgradeReverted)
		if !strings.Contains(cluster.Status.MajorUpgrade.Message, "pg_upgrade: killed") || cluster.Status.PostgresMajor != 15 {
			t.Fatalf("reverted: %+v, data major %d", cluster.Status.MajorUpgrade, cluster.Status.PostgresMajor)
		}
	})

	t.Run("with a follow kit the others join at once, not after the first backup", func(t *testing.T) {
		r, agents, cluster := upgraded()
		agents.upgrades["db-1"].FollowKit = true
		runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
		expectStep(t, cluster, pgv1.MajorUpgradeRebuildingReplicas)
		runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
		expectAsked(t, agents, "rebuild db-0  kit from db-1", "rebuild db-2  kit from db-1")
	})

	r, agents, cluster := upgraded()
	runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
	expectStep(t, cluster, pgv1.MajorUpgradeRebuildingReplicas)
	if up := cluster.Status.MajorUpgrade; cluster.Status.PostgresMajor != 17 || up.PointOfNoReturnAt == nil || up.PgUpgradeMillis != 2100 {
		t.Fatalf("past the point of no return: %+v, data major %d", up, cluster.Status.PostgresMajor)
	}
	runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
	expectAsked(t, agents) // waiting for the first backup
	agents.upgrades["db-1"].BackupLabel = "20261206-031500F"
	runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
	expectAsked(t, agents, "rebuild db-0 20261206-031500F", "rebuild db-2 20261206-031500F")
	runMajorUpgradeStage(t, r, cluster, pods, reports("17.6", "15.14"))
	expectAsked(t, agents) // rebuilding
	for name, copied := range map[string]int64{"db-0": 30 << 20, "db-2": 40 << 20} {
		rebuild := agents.rebuilds[name]
		rebuild.Method, rebuild.Copied, rebuild.Kept, rebuild.StoppedAt = agentapi.RebuildDelta, copied, 400<<20, rfc3339(time.Now())
	}
	done := reports("17.6", "17.6")
	done["db-0"].Streaming, done["db-2"].Streaming = true, true
	runMajorUpgradeStage(t, r, cluster, pods, done)
	expectStep(t, cluster, pgv1.MajorUpgradeCompleted)
	up := cluster.Status.MajorUpgrade
	if len(up.Replicas) != 2 || up.Replicas[0].Name != "db-0" || up.Replicas[0].BytesCopied != 30<<20 || up.Replicas[1].Method != agentapi.RebuildDelta || up.CompletedAt == nil {
		t.Fatalf("completed: %+v", up)
	}
	if c := meta.FindStatusCondition(cluster.Status.Conditions, pgv1.ConditionMajorUpgrade); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Completed" {
		t.Fatalf("condition %+v", c)
	}
}

// After the point of no return a replica not yet rebuilt runs the old major: failover must never
// promote it.
func TestFailoverCandidatesOfTheDataMajor(t *testing.T) {
	o := &ha.Observed{Pods: upgradePods("pg:17", true), Reports: map[string]*agentapi.Status{
		"db-1": {Role: agentapi.RoleReplica, ReceiveLSN: "0/9000000", ServerVersion: "15.14"},
		"db-2": {Role: agentapi.RoleReplica, ReceiveLSN: "0/3000000", ServerVersion: "17.6"},
	}}
	if got := ha.ChooseCandidate(ofMajor(o, 17), "db-0"); got != "db-2" {
		t.Fatalf("candidate = %q, want db-2", got)
	}
	if got := ha.ChooseCandidate(ofMajor(o, 0), "db-0"); got != "db-1" {
		t.Fatalf("without a known major: candidate = %q, want db-1", got)
	}
}

// The retry annotation checks a held upgrade again at once, and tries a reverted one again; each
// value once.
func TestMajorUpgradeRetried(t *testing.T) {
	for _, step := range []pgv1.MajorUpgradeStep{pgv1.MajorUpgradeCheckFailed, pgv1.MajorUpgradeReverted} {
		t.Run(string(step), func(t *testing.T) {
			r, agents := upgradeReconciler()
			cluster := upgradingCluster()
			checked := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			cluster.Status.MajorUpgrade = &pgv1.MajorUpgradeStatus{From: 15, To: 17, Mode: pgv1.MajorUpgradeLink, Step: step,
				StartedAt: &metav1.Time{Time: checked.Add(-time.Hour)}, CheckedAt: &checked}
			phase := agentapi.UpgradeCheckFailed
			if step == pgv1.MajorUpgradeReverted {
				phase = agentapi.UpgradeCheckPassed
			}
			agents.checks["db-1"] = &agentapi.MajorUpgradeCheckResult{To: 17, Mode: "link", Phase: phase,
				StartedAt: rfc3339(checked.Add(-time.Second)), StoppedAt: rfc3339(checked.Time)}
			pods, reports := upgradePods("pg:17", true), upgradeReports("15.14")
			runMajorUpgradeStage(t, r, cluster, pods, reports)
			expectStep(t, cluster, step)
			expectAsked(t, agents)
			cluster.Annotations = map[string]string{pgv1.RetryMajorUpgradeAnnotation: "1"}
			runMajorUpgradeStage(t, r, cluster, pods, reports)
			expectStep(t, cluster, pgv1.MajorUpgradeChecking)
			expectAsked(t, agents, "check db-1 link")
			agents.checks["db-1"].Phase, agents.checks["db-1"].StoppedAt = agentapi.UpgradeCheckFailed, rfc3339(time.Now())
			runMajorUpgradeStage(t, r, cluster, pods, reports)
			runMajorUpgradeStage(t, r, cluster, pods, reports)
			expectStep(t, cluster, pgv1.MajorUpgradeCheckFailed)
			expectAsked(t, agents)
		})
	}
}
