package controller

import (
	"crypto/tls"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// scope is what the stages of one reconcile share. The ensure stages fill statefulSet, the
// observe stage fills observed, and the decide stages only read those and set primary.
type scope struct {
	cluster *pgv1.PostgresCluster
	// original is the cluster as read, the base of the status patch.
	original *pgv1.PostgresCluster

	statefulSet *appsv1.StatefulSet
	// postgresMajor is the PostgreSQL major the cluster runs (resolveMajor), 0 until known.
	postgresMajor int32
	// credentialsVersions are the credentials Secrets' resourceVersions, by name, as ensured;
	// credentialsAnnounced is set once a rotation (if any) was announced, for the status.
	credentialsVersions  map[string]string
	credentialsAnnounced bool
	observed             *observed
	// configHash identifies the configuration files of the ConfigMap as ensured
	// (agentapi.ConfigHash), which the agents report once they loaded them.
	configHash string
	// primary is the instance decided to be primary, "" before there is one.
	primary string
	// targetPrimary and switchoverLSN are a running switchover's state, as the status has it
	// and the switchover stage moves it on; with failoverReason, a failover's.
	targetPrimary, switchoverLSN, failoverReason string
	// detached are the instances ordered to detach from the old primary in this reconcile.
	detached []string
	// switchoverRequest is the switchover annotation's value last acted on; switchoverReason
	// why a running switchover started (SwitchoverForUpdate, or empty for the annotation).
	switchoverRequest, switchoverReason string
	// majorUpgrade is the major upgrade as the status has it and advanceMajorUpgrade moves it
	// on; nil when there is none.
	majorUpgrade *pgv1.MajorUpgradeStatus
	// primaryReplacedAt: the primary's pod was deleted to be replaced in place; failover
	// waits for it.
	primaryReplacedAt *metav1.Time
	// waiting says why the cluster is not there yet (condition reason and message).
	waiting *reasonMessage
	// failure says why the cluster cannot proceed: bad input or an error.
	failure *reasonMessage
	// backupProblem says what is wrong with the backup repositories' Secrets.
	backupProblem *reasonMessage
	// certificatesRenewed is the TLS Secret's resourceVersion when this reconcile renewed it.
	certificatesRenewed string
	// certificateProblem says why spec.certificates' Secrets are not used.
	certificateProblem *reasonMessage
	// switchoverProblem says why the switchover annotation cannot be carried out.
	switchoverProblem *reasonMessage
	// monitoringProblem says why spec.monitoring cannot be honoured.
	monitoringProblem *reasonMessage
	// childrenUnchanged: the cluster and its owned objects are as the last reconcile found them
	// up to date, so the ensure stages skip their work (postgrescluster_unchanged.go). Otherwise
	// ensured collects the objects found up to date, and childrenWritten says one was written.
	childrenUnchanged, childrenWritten bool
	ensured                            []ensuredChild
	// renewAt is when the cluster's certificates are next due for renewal; agentTLS is how the
	// operator reaches agents that serve HTTPS (certificates.go).
	renewAt  time.Time
	agentTLS *tls.Config
	// caCert verifies PostgreSQL's certificate (PEM, the cluster's CA and the user's server CA
	// when spec.certificates names one), for the application Secret.
	caCert []byte
	// caSecret and tlsSecret are the cluster's CA and TLS Secrets as ensured; a CA rotation
	// waits for the agents to report the latter's files loaded (agentapi.CertificatesDigest).
	caSecret, tlsSecret *corev1.Secret
	// tlsRequired: every instance runs an agent with certificates, so the configuration may
	// require TLS of every remote connection.
	tlsRequired bool
	// tlsNowRequired: this reconcile changed the ConfigMap's policy to require TLS (the last
	// instance without certificates was replaced); the pods are touched so that it applies at
	// once.
	tlsNowRequired bool
	// created and updated name the owned objects this reconcile wrote ("Kind name"), for one
	// Event each instead of one per object.
	created, updated []string
}

// observed is what the instances look like now (ha.Observed: the pods and the agents' reports),
// and the token the agents were asked with.
type observed struct {
	ha.Observed
	// token is the agents' bearer token; empty while the cache has not seen its Secret.
	token string
}

type reasonMessage struct {
	reason, message string
}

func newScope(cluster *pgv1.PostgresCluster) *scope {
	return &scope{cluster: cluster, original: cluster.DeepCopy(), observed: &observed{},
		targetPrimary: cluster.Status.TargetPrimary, switchoverLSN: cluster.Status.SwitchoverLSN,
		failoverReason: cluster.Status.FailoverReason, switchoverRequest: cluster.Status.SwitchoverRequest,
		switchoverReason: cluster.Status.SwitchoverReason, primaryReplacedAt: cluster.Status.PrimaryReplacedAt,
		majorUpgrade: cluster.Status.MajorUpgrade.DeepCopy()}
}

// endpoint is how the operator reaches the agent of pod.
func (r *PostgresClusterReconciler) endpoint(s *scope, pod *corev1.Pod) agentapi.Endpoint {
	if !pgbuilder.IsInstancePod(s.cluster, pod) {
		return agentapi.Endpoint{} // never the token to a pod that only looks like an instance
	}
	e := agentapi.Endpoint{Address: r.agentAddress(pod), Token: s.observed.token}
	if agentclient.ServesTLS(pod) {
		e.TLS = s.agentTLS
	}
	return e
}

// stop ends a reconcile before its later stages: the cluster waits for something, or its spec
// or inputs are invalid (failed). It is the one way a stage says "not yet".
type stop struct {
	reasonMessage
	failed bool
	// retry looks again after the requeue interval, or after after when it is set; otherwise
	// only a watch event (a spec change, a child's change) or the periodic health check brings
	// the next reconcile.
	retry bool
	after time.Duration
}

// waitFor: the cluster is on its way; look again soon.
func waitFor(reason, message string) *stop {
	return &stop{reasonMessage: reasonMessage{reason, message}, retry: true}
}

// invalid: the spec cannot be carried out; a change of it brings the next reconcile.
func invalid(reason, message string) *stop {
	return &stop{reasonMessage: reasonMessage{reason, message}, failed: true}
}

// refused: the API server refused a child for a reason retrying cannot fix (the spec makes an
// invalid object, the namespace is terminating); the cluster holds back its writes for after,
// unless its spec changes (holdAfterRefusal).
func refused(reason, message string, after time.Duration) *stop {
	return &stop{reasonMessage: reasonMessage{reason, message}, failed: true, retry: true, after: after}
}

// invalidUntilFixed: an input outside the cache (no watch) is wrong; look again soon.
func invalidUntilFixed(reason, message string) *stop {
	return &stop{reasonMessage: reasonMessage{reason, message}, failed: true, retry: true}
}
