package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// reasonBootstrapping: a new cluster waits for its first instance to become ready.
const reasonBootstrapping = "Bootstrapping"

// decidePrimary settles who is primary and labels it role=primary and every other instance
// role=replica, so that the -rw and -ro Services route to them.
func (r *PostgresClusterReconciler) decidePrimary(ctx context.Context, s *scope) (*stop, error) {
	primary, st := choosePrimary(s.cluster, s.observed)
	s.primary = primary
	if st != nil {
		if st.reason == reasonBootstrapping {
			// The first pod's readiness, which ends this wait, is watched.
			st.after = r.watchedWaitPoll(time.Since(s.cluster.CreationTimestamp.Time))
		}
		return st, nil
	}
	return nil, r.labelRoles(ctx, s, s.primary)
}

// choosePrimary is the instance whose PostgreSQL says it is primary, when the agents answered;
// else the pod already labelled primary; else, for a new cluster, the first instance once it is
// ready. Two instances claiming to be primary stop everything until fencing exists: relabelling
// either could send writes to the wrong one.
func choosePrimary(c *pgv1.PostgresCluster, o *observed) (string, *stop) {
	labelled := ""
	for i := range o.Pods {
		if o.Pods[i].Labels[pgbuilder.RoleLabel] == pgbuilder.RolePrimary {
			labelled = o.Pods[i].Name
			break
		}
	}
	var claims []string
	for name, report := range o.Reports {
		if report.Role == agentapi.RolePrimary {
			claims = append(claims, name)
		}
	}
	slices.Sort(claims)
	switch {
	case len(claims) > 1:
		return labelled, invalid("MultiplePrimaries", fmt.Sprintf(
			"instances %s all claim to be primary; pgpilot changes nothing until this is resolved", strings.Join(claims, ", ")))
	case len(claims) == 1:
		return claims[0], nil
	case labelled != "":
		return labelled, nil
	}
	first := pgbuilder.InstancePodName(c, 0)
	if pod := o.Pod(first); pod != nil && ha.PodReady(pod) {
		return first, nil
	}
	return "", waitFor(reasonBootstrapping, fmt.Sprintf("waiting for %s to initialise PostgreSQL and accept connections", first))
}

// labelRoles puts every instance's role on its pod: primary on the one named (none when
// fencing), replica on the others.
func (r *PostgresClusterReconciler) labelRoles(ctx context.Context, s *scope, primary string) error {
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		role := pgbuilder.RoleReplica
		if pod.Name == primary {
			role = pgbuilder.RolePrimary
		}
		if pod.Labels[pgbuilder.RoleLabel] == role {
			continue
		}
		// A merge patch, not an apply: the pod belongs to the StatefulSet, and a vanished pod must
		// fail with NotFound rather than be re-created from a partial object.
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[pgbuilder.RoleLabel] = role
		if err := r.Patch(ctx, pod, patch, client.FieldOwner(pgbuilder.FieldOwner)); err != nil {
			return fmt.Errorf("label pod %s %s: %w", pod.Name, role, err)
		}
		recordWrite("Pod", "labelled")
		if role == pgbuilder.RolePrimary {
			r.event(s.cluster, pod, corev1.EventTypeNormal, "PrimaryElected", "Label", "Pod %s is the primary", pod.Name)
		}
	}
	return nil
}
