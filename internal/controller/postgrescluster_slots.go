package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// dropRemovedSlots asks the primary's agent to drop the replication slots of instances the
// cluster scaled away: unused, they would keep WAL on the primary forever.
func (r *PostgresClusterReconciler) dropRemovedSlots(ctx context.Context, s *scope) (*stop, error) {
	removed := removedSlots(s.cluster, s.observed.Reports[s.primary])
	pod := s.observed.Pod(s.primary)
	if len(removed) == 0 || pod == nil {
		return nil, nil
	}
	dropped, err := r.agents().DropSlots(ctx, r.endpoint(s, pod), removed)
	if err != nil {
		return nil, fmt.Errorf("drop replication slots %v on %s: %w", removed, s.primary, err)
	}
	if len(dropped) > 0 {
		r.event(s.cluster, pod, corev1.EventTypeNormal, "ReplicationSlotsDropped", "Scale",
			"Dropped replication slots %s of removed instances on %s", strings.Join(dropped, ", "), s.primary)
	}
	return nil, nil
}

// removedSlots are the primary's inactive slots of this cluster's instances beyond
// spec.instances. Slots of instances within it are kept even while their pod is gone, as it
// comes back to use them.
func removedSlots(c *pgv1.PostgresCluster, primary *agentapi.Status) []string {
	if primary == nil {
		return nil
	}
	wanted := map[string]bool{}
	for i := range int(c.Spec.Instances) {
		wanted[agentapi.SlotName(pgbuilder.InstancePodName(c, i))] = true
	}
	ours := agentapi.SlotName(pgbuilder.StatefulSetName(c) + "-")
	var removed []string
	for _, slot := range primary.Slots {
		if !slot.Active && strings.HasPrefix(slot.Name, ours) && !wanted[slot.Name] {
			removed = append(removed, slot.Name)
		}
	}
	return removed
}
