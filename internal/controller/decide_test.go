package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

func testPod(name, role string, ready bool) corev1.Pod {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if role != "" {
		pod.Labels[pgbuilder.RoleLabel] = role
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return pod
}

func testCluster(instances int32) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}}
	c.Spec.Instances = instances
	return c
}

var (
	primaryReport = &agentapi.Status{Role: agentapi.RolePrimary}
	replicaReport = &agentapi.Status{Role: agentapi.RoleReplica, Streaming: true}
)

func TestChoosePrimary(t *testing.T) {
	tests := []struct {
		name       string
		pods       []corev1.Pod
		reports    map[string]*agentapi.Status
		want       string
		wantReason string // of the stop, "" for none
		wantFailed bool
	}{
		{name: "a new cluster waits for its first instance",
			pods: []corev1.Pod{testPod("db-0", "", false)}, wantReason: "Bootstrapping"},
		{name: "a new cluster's first instance once ready",
			pods: []corev1.Pod{testPod("db-0", "", true), testPod("db-1", "", true)}, want: "db-0"},
		{name: "the labelled pod when the agents did not answer",
			pods: []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RolePrimary, false)}, want: "db-1"},
		{name: "the agents' word over the labels",
			pods:    []corev1.Pod{testPod("db-0", pgbuilder.RolePrimary, true), testPod("db-1", pgbuilder.RoleReplica, true)},
			reports: map[string]*agentapi.Status{"db-0": replicaReport, "db-1": primaryReport}, want: "db-1"},
		{name: "two claims stop everything and keep the labelled primary",
			pods:    []corev1.Pod{testPod("db-0", pgbuilder.RolePrimary, true), testPod("db-1", pgbuilder.RoleReplica, true)},
			reports: map[string]*agentapi.Status{"db-0": primaryReport, "db-1": primaryReport},
			want:    "db-0", wantReason: "MultiplePrimaries", wantFailed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, st := choosePrimary(testCluster(2), &observed{Observed: ha.Observed{Pods: tt.pods, Reports: tt.reports}})
			if got != tt.want {
				t.Errorf("primary %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantReason == "" && st != nil:
				t.Errorf("stopped: %+v", st)
			case tt.wantReason != "" && (st == nil || st.reason != tt.wantReason || st.failed != tt.wantFailed):
				t.Errorf("stop %+v, want reason %s failed %v", st, tt.wantReason, tt.wantFailed)
			}
		})
	}
}

func TestNextRestart(t *testing.T) {
	pending := func(role string) *agentapi.Status {
		return &agentapi.Status{Role: role, PendingRestart: []string{"shared_buffers"}}
	}
	loaded := func(hash string) *agentapi.Status {
		return &agentapi.Status{Role: agentapi.RoleReplica, Streaming: true, ConfigHash: hash}
	}
	tests := []struct {
		name         string
		reports      map[string]*agentapi.Status
		want, behind string
	}{
		{"nothing pending", map[string]*agentapi.Status{"db-0": primaryReport, "db-1": replicaReport}, "", ""},
		{"replicas by ordinal before the primary",
			map[string]*agentapi.Status{"db-0": pending(agentapi.RolePrimary), "db-10": pending(agentapi.RoleReplica), "db-2": pending(agentapi.RoleReplica)}, "db-2", ""},
		{"the primary last", map[string]*agentapi.Status{"db-0": pending(agentapi.RolePrimary), "db-1": replicaReport}, "db-0", ""},
		{"the primary last, after the replicas loaded the configuration",
			map[string]*agentapi.Status{"db-0": pending(agentapi.RolePrimary), "db-1": loaded("new")}, "db-0", ""},
		{"not the primary while a replica has not loaded the configuration (its kubelet has not projected it yet)",
			map[string]*agentapi.Status{"db-0": pending(agentapi.RolePrimary), "db-1": loaded("new"), "db-2": loaded("old")}, "", "db-2"},
		{"a replica behind does not hold back another replica's restart",
			map[string]*agentapi.Status{"db-0": pending(agentapi.RolePrimary), "db-1": pending(agentapi.RoleReplica), "db-2": loaded("old")}, "db-1", ""},
		{"a replica behind holds nothing back when the primary has nothing pending",
			map[string]*agentapi.Status{"db-0": primaryReport, "db-2": loaded("old")}, "", ""},
	}
	for _, tt := range tests {
		if got, behind := nextRestart(tt.reports, "db-0", "new"); got != tt.want || behind != tt.behind {
			t.Errorf("%s: %q, behind %q, want %q, behind %q", tt.name, got, behind, tt.want, tt.behind)
		}
	}
}

func TestRemovedSlots(t *testing.T) {
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Slots: []agentapi.SlotStatus{
		{Name: "db_1", Active: false}, // within spec.instances: its pod comes back
		{Name: "db_2", Active: false}, // scaled away
		{Name: "db_3", Active: true},  // scaled away but still streaming: kept until it stops
		{Name: "other_1", Active: false},
	}}
	if got := removedSlots(testCluster(2), primary); !slices.Equal(got, []string{"db_2"}) {
		t.Errorf("removed %v, want [db_2]", got)
	}
	if got := removedSlots(testCluster(2), nil); got != nil {
		t.Errorf("without a primary report: %v", got)
	}
}

// The decide stages act only on what was observed, through the agent client.
func TestDecideStagesCallTheRightAgent(t *testing.T) {
	agents := newFakeAgents()
	r := &PostgresClusterReconciler{Agents: agents, AgentAddress: func(p *corev1.Pod) string { return p.Name + ":8000" }}
	s := newScope(testCluster(2))
	s.statefulSet = &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2}}
	s.primary = "db-0"
	s.observed = &observed{Observed: ha.Observed{
		Pods: []corev1.Pod{testPod("db-0", pgbuilder.RolePrimary, true), testPod("db-1", pgbuilder.RoleReplica, true)},
		Reports: map[string]*agentapi.Status{
			"db-0": {Role: agentapi.RolePrimary, PendingRestart: []string{"max_connections"},
				Slots: []agentapi.SlotStatus{{Name: "db_1", Active: true}, {Name: "db_5"}}},
			"db-1": {Role: agentapi.RoleReplica, Streaming: true, PendingRestart: []string{"max_connections"}},
		},
	}}
	ctx := context.Background()
	if st, err := r.dropRemovedSlots(ctx, s); st != nil || err != nil {
		t.Fatalf("slots: %v %v", st, err)
	}
	if got := agents.drops["db-0:8000"]; !slices.Equal(got, []string{"db_5"}) {
		t.Errorf("dropped %v on the primary, want [db_5]", agents.drops)
	}
	st, err := r.restartPending(ctx, s)
	if err != nil || st == nil || st.reason != "RollingRestart" || !st.retry {
		t.Fatalf("restart: %+v %v", st, err)
	}
	if !slices.Equal(agents.restarts, []string{"db-1:8000"}) {
		t.Errorf("restarted %v, want the replica first", agents.restarts)
	}
	// An agent already restarting is waited for, not asked again nor reported as an error.
	agents.busy["db-1:8000"] = true
	if st, err := r.restartPending(ctx, s); err != nil || st == nil || st.reason != "RollingRestart" {
		t.Fatalf("restart while busy: %+v %v", st, err)
	}
	// A replica that stops streaming holds every restart back.
	s.observed.Reports["db-1"] = &agentapi.Status{Role: agentapi.RoleReplica, PendingRestart: []string{"max_connections"}}
	if st, _ := r.restartPending(ctx, s); st == nil || st.reason != "RestartWaiting" {
		t.Errorf("unhealthy cluster: %+v, want RestartWaiting", st)
	}
	if len(agents.restarts) != 1 {
		t.Errorf("restarted %v", agents.restarts)
	}
}

func TestWatchedWaitPoll(t *testing.T) {
	r := &PostgresClusterReconciler{RequeueInterval: 15 * time.Second}
	for _, tt := range []struct {
		waited, want time.Duration
	}{
		{0, 15 * time.Second},
		{20 * time.Second, 15 * time.Second},
		{time.Minute, 30 * time.Second},
		{3 * time.Minute, 90 * time.Second},
		{time.Hour, maxWatchedWaitPoll},
	} {
		if got := r.watchedWaitPoll(tt.waited); got != tt.want {
			t.Errorf("watchedWaitPoll(%s) = %s, want %s", tt.waited, got, tt.want)
		}
	}
}
