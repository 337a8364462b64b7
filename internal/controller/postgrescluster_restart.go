package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// restartPending applies settings that only take effect at start: it restarts one instance at
// a time, replicas first and the primary last, and only while the cluster is otherwise healthy
// (the primary writable, every replica streaming), so that a restart never stacks on a problem.
func (r *PostgresClusterReconciler) restartPending(ctx context.Context, s *scope) (ctrl.Result, error) {
	var replicas []string
	primaryPending := false
	for name, status := range s.agents {
		if len(status.PendingRestart) == 0 {
			continue
		}
		if name == s.primary {
			primaryPending = true
		} else if status.Role == postgres.RoleReplica {
			replicas = append(replicas, name)
		}
	}
	if len(replicas) == 0 && !primaryPending {
		return ctrl.Result{}, nil
	}
	if !allReady(observe(s)) {
		s.wait("RestartWaiting", "settings wait for a restart; pgpilot restarts instances only while the cluster is healthy")
		return r.notYet(), nil
	}
	slices.SortFunc(replicas, compareNames)
	target := s.primary
	if len(replicas) > 0 {
		target = replicas[0]
	}
	pod := s.pod(target)
	if pod == nil {
		return ctrl.Result{}, nil
	}
	pending := s.agents[target].PendingRestart
	switch code, err := r.callAgent(ctx, pod, s.agentToken, http.MethodPost, agent.PathRestart, nil, nil); {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("restart %s: %w", target, err)
	case code == http.StatusConflict:
		// Already restarting; look again shortly.
	case code != http.StatusAccepted:
		return ctrl.Result{}, fmt.Errorf("restart %s: agent answered %d", target, code)
	default:
		r.event(s.cluster, pod, corev1.EventTypeNormal, "InstanceRestarted", "Restart",
			"Restarting %s to apply %s", target, strings.Join(pending, ", "))
	}
	s.wait("RollingRestart", fmt.Sprintf("restarting %s to apply %s", target, strings.Join(pending, ", ")))
	return r.notYet(), nil
}
