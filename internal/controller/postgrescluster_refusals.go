package controller

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// defaultRefusalBackoff: a refused write is tried again this long after, in case what made
// the API server refuse it (a webhook, a namespace stuck terminating) went away by itself.
const defaultRefusalBackoff = 5 * time.Minute

// Degraded reasons of a write the API server refused for good.
const (
	reasonNamespaceTerminating = "NamespaceTerminating"
	reasonChildRejected        = "ChildRejected"
)

func (r *PostgresClusterReconciler) refusalBackoff() time.Duration {
	return cmp.Or(r.RefusalBackoff, defaultRefusalBackoff)
}

// refusalOf turns an error from writing a child into a stop when retrying cannot fix it:
// otherwise every watch event and every backoff step would repeat a write the API server
// rejects (about 1,700 of them in 3 minutes for 100 clusters in a namespace stuck terminating).
func refusalOf(err error, backoff time.Duration) *stop {
	switch {
	case err == nil:
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return refused(reasonNamespaceTerminating,
			"the namespace is terminating: pgpilot creates nothing in it (the API server refused: "+err.Error()+")", backoff)
	case apierrors.IsInvalid(err):
		return refused(reasonChildRejected, fmt.Sprintf(
			"the API server rejects an object made from this spec; fix the spec (it is tried again in %s): %v", backoff, err), backoff)
	}
	return nil
}

// refusalRetryWindow is how long, at the start of each backoff period, writes are tried again.
const refusalRetryWindow = 10 * time.Second

// holdAfterRefusal keeps a cluster whose child was refused for good from writing, as its
// Degraded condition says, until its spec changes. Writes are tried again only in the first
// moments of each backoff period counted from when the condition began: the condition is the
// memory, so a restarted operator holds back just the same, and a refusal that persists
// costs one attempt a period however many watch events arrive.
func (r *PostgresClusterReconciler) holdAfterRefusal(_ context.Context, s *scope) (*stop, error) {
	c := meta.FindStatusCondition(s.cluster.Status.Conditions, pgv1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != s.cluster.Generation ||
		(c.Reason != reasonNamespaceTerminating && c.Reason != reasonChildRejected) {
		return nil, nil
	}
	backoff := r.refusalBackoff()
	intoPeriod := time.Since(c.LastTransitionTime.Time) % backoff
	if time.Since(c.LastTransitionTime.Time) >= backoff && intoPeriod < refusalRetryWindow {
		return nil, nil
	}
	return refused(c.Reason, c.Message, backoff-intoPeriod), nil
}
