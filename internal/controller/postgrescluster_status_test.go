package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// wantStatusCondition is the part of a condition computeStatus decides.
type wantStatusCondition struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

func TestComputeStatus(t *testing.T) {
	const previousGeneration, generation = 3, 4
	noProblem := wantStatusCondition{metav1.ConditionFalse, "AsExpected", "no problem found"}
	tests := []struct {
		name            string
		obs             summary
		wantPhase       pgv1.Phase
		wantObservedGen int64
		wantReady       wantStatusCondition
		wantProgressing wantStatusCondition
		wantDegraded    wantStatusCondition
	}{
		{
			name:            "no primary and no instances is pending",
			obs:             summary{health: health{desired: 3}},
			wantPhase:       pgv1.PhasePending,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "NoPrimary", "the cluster has no primary yet"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "0 of 3 instances ready"},
			wantDegraded:    noProblem,
		},
		{
			name:            "no primary with instances is bootstrapping and says what it waits for",
			obs:             summary{health: health{desired: 3, instances: 1}, waiting: &reasonMessage{reason: "WaitingForPrimary", message: "waiting for db-0 to initialise"}},
			wantPhase:       pgv1.PhaseBootstrapping,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "NoPrimary", "the cluster has no primary yet"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "WaitingForPrimary", "waiting for db-0 to initialise"},
			wantDegraded:    noProblem,
		},
		{
			name:            "primary and every instance ready",
			obs:             summary{health: health{desired: 3, instances: 3, readyInstances: 3, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 2}},
			wantPhase:       pgv1.PhaseReady,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionTrue, "ClusterReady", "primary db-0 accepts connections and all 3 instances are ready"},
			wantProgressing: wantStatusCondition{metav1.ConditionFalse, "Reconciled", "the cluster matches its spec"},
			wantDegraded:    noProblem,
		},
		{
			name:            "a ready cluster that waits (rolling restart) is ready and progressing",
			obs:             summary{health: health{desired: 1, instances: 1, readyInstances: 1, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 0}, waiting: &reasonMessage{reason: "RollingRestart", message: "restarting db-0 to apply shared_buffers"}},
			wantPhase:       pgv1.PhaseReady,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionTrue, "ClusterReady", "primary db-0 accepts connections and all 1 instances are ready"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "RollingRestart", "restarting db-0 to apply shared_buffers"},
			wantDegraded:    noProblem,
		},
		{
			name:            "primary ready, two of three instances ready is scaling",
			obs:             summary{health: health{desired: 3, instances: 3, readyInstances: 2, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 1}},
			wantPhase:       pgv1.PhaseScaling,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "InstancesNotReady", "2 of 3 instances ready"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "2 of 3 instances ready"},
			wantDegraded:    noProblem,
		},
		{
			name:            "every pod ready but the primary's agent has not confirmed it is writable",
			obs:             summary{health: health{desired: 2, instances: 2, readyInstances: 2, primary: "db-0", primaryReady: true, streamingReplicas: 1}},
			wantPhase:       pgv1.PhaseScaling,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "PrimaryNotConfirmed", "the agent of db-0 has not confirmed it is a writable primary"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "2 of 2 instances ready"},
			wantDegraded:    noProblem,
		},
		{
			name:            "every pod ready but a replica does not stream",
			obs:             summary{health: health{desired: 3, instances: 3, readyInstances: 3, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 1}},
			wantPhase:       pgv1.PhaseScaling,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "ReplicasNotStreaming", "1 of 2 replicas stream from the primary"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "3 of 3 instances ready"},
			wantDegraded:    noProblem,
		},
		{
			name:            "fewer instances than desired is scaling",
			obs:             summary{health: health{desired: 3, instances: 2, readyInstances: 2, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 1}},
			wantPhase:       pgv1.PhaseScaling,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "InstancesNotReady", "2 of 3 instances ready"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "2 of 3 instances ready"},
			wantDegraded:    noProblem,
		},
		{
			name:            "primary not ready is degraded",
			obs:             summary{health: health{desired: 3, instances: 3, readyInstances: 2, primary: "db-0"}},
			wantPhase:       pgv1.PhaseDegraded,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "PrimaryNotReady", "primary db-0 does not accept connections"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "2 of 3 instances ready"},
			wantDegraded:    wantStatusCondition{metav1.ConditionTrue, "PrimaryNotReady", "primary db-0 does not accept connections"},
		},
		{
			name:            "an instance the scheduler cannot place is degraded, saying why",
			obs:             summary{health: health{desired: 3, instances: 1, unschedulable: "pod db-0 cannot be scheduled: 0/1 nodes are available"}},
			wantPhase:       pgv1.PhaseBootstrapping,
			wantObservedGen: generation,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "NoPrimary", "the cluster has no primary yet"},
			wantProgressing: wantStatusCondition{metav1.ConditionTrue, "Scaling", "0 of 3 instances ready"},
			wantDegraded:    wantStatusCondition{metav1.ConditionTrue, "InstancesUnschedulable", "pod db-0 cannot be scheduled: 0/1 nodes are available"},
		},
		{
			name:            "failure is degraded, stops progressing and keeps the observed generation",
			obs:             summary{health: health{desired: 3, instances: 3, readyInstances: 3, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 2}, failure: &reasonMessage{reason: "NoImage", message: "spec.image is empty"}},
			wantPhase:       pgv1.PhaseDegraded,
			wantObservedGen: previousGeneration,
			wantReady:       wantStatusCondition{metav1.ConditionTrue, "ClusterReady", "primary db-0 accepts connections and all 3 instances are ready"},
			wantProgressing: wantStatusCondition{metav1.ConditionFalse, "NoImage", "stopped: spec.image is empty"},
			wantDegraded:    wantStatusCondition{metav1.ConditionTrue, "NoImage", "spec.image is empty"},
		},
		{
			name:            "failure wins over a waiting reason",
			obs:             summary{health: health{desired: 3, instances: 1}, waiting: &reasonMessage{reason: "WaitingForPrimary", message: "waiting"}, failure: &reasonMessage{reason: "AppSecretNotFound", message: "Secret \"x\" does not exist"}},
			wantPhase:       pgv1.PhaseDegraded,
			wantObservedGen: previousGeneration,
			wantReady:       wantStatusCondition{metav1.ConditionFalse, "NoPrimary", "the cluster has no primary yet"},
			wantProgressing: wantStatusCondition{metav1.ConditionFalse, "AppSecretNotFound", "stopped: Secret \"x\" does not exist"},
			wantDegraded:    wantStatusCondition{metav1.ConditionTrue, "AppSecretNotFound", "Secret \"x\" does not exist"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.obs.generation = generation
			status := &pgv1.PostgresClusterStatus{ObservedGeneration: previousGeneration}
			computeStatus(status, tt.obs)

			if status.Phase != tt.wantPhase {
				t.Errorf("phase = %q, want %q", status.Phase, tt.wantPhase)
			}
			if status.ObservedGeneration != tt.wantObservedGen {
				t.Errorf("observedGeneration = %d, want %d", status.ObservedGeneration, tt.wantObservedGen)
			}
			if status.Instances != tt.obs.instances || status.ReadyInstances != tt.obs.readyInstances || status.CurrentPrimary != tt.obs.primary {
				t.Errorf("instances/ready/primary = %d/%d/%q, want %d/%d/%q", status.Instances, status.ReadyInstances,
					status.CurrentPrimary, tt.obs.instances, tt.obs.readyInstances, tt.obs.primary)
			}
			if len(status.Conditions) != 3 {
				t.Errorf("got %d conditions, want 3: %+v", len(status.Conditions), status.Conditions)
			}
			for conditionType, want := range map[string]wantStatusCondition{
				pgv1.ConditionReady:       tt.wantReady,
				pgv1.ConditionProgressing: tt.wantProgressing,
				pgv1.ConditionDegraded:    tt.wantDegraded,
			} {
				got := meta.FindStatusCondition(status.Conditions, conditionType)
				if got == nil {
					t.Errorf("condition %s missing", conditionType)
					continue
				}
				if gotPart := (wantStatusCondition{got.Status, got.Reason, got.Message}); gotPart != want {
					t.Errorf("condition %s = %+v, want %+v", conditionType, gotPart, want)
				}
				if got.ObservedGeneration != generation {
					t.Errorf("condition %s observedGeneration = %d, want %d", conditionType, got.ObservedGeneration, generation)
				}
				if got.LastTransitionTime.IsZero() {
					t.Errorf("condition %s has no lastTransitionTime", conditionType)
				}
			}
		})
	}
}

func TestComputeStatusLastTransitionTime(t *testing.T) {
	old := metav1.NewTime(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC))
	allReady := summary{health: health{desired: 3, instances: 3, readyInstances: 3, primary: "db-0", primaryReady: true, primaryWritable: true, streamingReplicas: 2}, generation: 1}
	scaling := allReady
	scaling.readyInstances = 2

	tests := []struct {
		name      string
		second    summary
		wantMoved map[string]bool
	}{
		{
			name:   "same observation keeps every transition time",
			second: allReady,
			wantMoved: map[string]bool{
				pgv1.ConditionReady: false, pgv1.ConditionProgressing: false, pgv1.ConditionDegraded: false,
			},
		},
		{
			// Ready and Progressing flip; Degraded stays False with the same reason.
			name:   "a flipped status moves only that condition's transition time",
			second: scaling,
			wantMoved: map[string]bool{
				pgv1.ConditionReady: true, pgv1.ConditionProgressing: true, pgv1.ConditionDegraded: false,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &pgv1.PostgresClusterStatus{}
			computeStatus(status, allReady)
			for i := range status.Conditions {
				status.Conditions[i].LastTransitionTime = old
			}

			computeStatus(status, tt.second)

			for conditionType, wantMoved := range tt.wantMoved {
				got := meta.FindStatusCondition(status.Conditions, conditionType)
				if got == nil {
					t.Fatalf("condition %s missing", conditionType)
				}
				if moved := !got.LastTransitionTime.Equal(&old); moved != wantMoved {
					t.Errorf("condition %s lastTransitionTime = %s, moved = %v, want moved = %v",
						conditionType, got.LastTransitionTime, moved, wantMoved)
				}
			}
		})
	}
}
