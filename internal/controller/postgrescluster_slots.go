package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// dropRemovedSlots asks the primary's agent to drop the replication slots of instances the
// cluster scaled away: unused, they would keep WAL on the primary forever. Slots of instances
// within spec.instances are kept even while their pod is gone, as it comes back to use them.
func (r *PostgresClusterReconciler) dropRemovedSlots(ctx context.Context, s *scope) (ctrl.Result, error) {
	primary := s.agents[s.primary]
	if primary == nil {
		return ctrl.Result{}, nil
	}
	wanted := map[string]bool{}
	for i := range int(s.cluster.Spec.Instances) {
		wanted[agent.SlotName(pgbuilder.InstancePodName(s.cluster, i))] = true
	}
	ours := agent.SlotName(pgbuilder.StatefulSetName(s.cluster) + "-")
	var removed []string
	for _, slot := range primary.Slots {
		if !slot.Active && strings.HasPrefix(slot.Name, ours) && !wanted[slot.Name] {
			removed = append(removed, slot.Name)
		}
	}
	if len(removed) == 0 {
		return ctrl.Result{}, nil
	}
	pod := s.pod(s.primary)
	if pod == nil {
		return ctrl.Result{}, nil
	}
	dropped, err := r.dropSlots(ctx, pod, s.agentToken, removed)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("drop replication slots %v on %s: %w", removed, s.primary, err)
	}
	if len(dropped) > 0 {
		r.event(s.cluster, pod, corev1.EventTypeNormal, "ReplicationSlotsDropped", "Scale",
			"Dropped replication slots %s of removed instances on %s", strings.Join(dropped, ", "), s.primary)
	}
	return ctrl.Result{}, nil
}

func (r *PostgresClusterReconciler) dropSlots(ctx context.Context, pod *corev1.Pod, token string, slots []string) ([]string, error) {
	var answer agent.DropSlotsRequest
	code, err := r.callAgent(ctx, pod, token, http.MethodPost, agent.PathDropSlots, agent.DropSlotsRequest{Slots: slots}, &answer)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("agent answered %d", code)
	}
	return answer.Slots, err
}
