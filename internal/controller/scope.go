package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// scope is what the stages of one reconcile share: the cluster and what they observed.
type scope struct {
	cluster *pgv1.PostgresCluster
	// original is the cluster as read, the base of the status patch.
	original *pgv1.PostgresCluster

	statefulSet *appsv1.StatefulSet
	pods        []corev1.Pod
	primary     string
	// agents holds what each instance's agent reported, by pod name; instances is the
	// status.instancesStatus built from it.
	agents     map[string]*postgres.Status
	agentToken string
	instances  []pgv1.InstanceStatus
	// waiting says why the cluster is not there yet (condition reason and message).
	waiting *reasonMessage
	// failure says why the cluster cannot proceed: bad input or an error.
	failure *reasonMessage
	// created and updated name the owned objects this reconcile wrote ("Kind name"), for one
	// Event each instead of one per object.
	created, updated []string
}

type reasonMessage struct {
	reason, message string
}

func newScope(cluster *pgv1.PostgresCluster) *scope {
	return &scope{cluster: cluster, original: cluster.DeepCopy()}
}

func (s *scope) fail(reason, message string) {
	s.failure = &reasonMessage{reason: reason, message: message}
}

func (s *scope) wait(reason, message string) {
	s.waiting = &reasonMessage{reason: reason, message: message}
}

// pod is the instance pod named name, or nil.
func (s *scope) pod(name string) *corev1.Pod {
	for i := range s.pods {
		if s.pods[i].Name == name {
			return &s.pods[i]
		}
	}
	return nil
}
