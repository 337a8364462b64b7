package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// restartPending applies settings that only take effect at start: it restarts one instance at
// a time, replicas first and the primary last, and only while the cluster is otherwise healthy
// (the primary writable, every replica streaming), so that a restart never stacks on a problem.
func (r *PostgresClusterReconciler) restartPending(ctx context.Context, s *scope) (*stop, error) {
	target, behind := nextRestart(s.observed.Reports, s.primary, s.configHash)
	if behind != "" {
		return waitFor("RestartWaiting", fmt.Sprintf("the primary restarts last, once %s has loaded the new configuration", behind)), nil
	}
	if target == "" {
		return nil, nil
	}
	if !assessHealth(s).allReady() {
		return waitFor("RestartWaiting", "settings wait for a restart; pgpilot restarts instances only while the cluster is healthy"), nil
	}
	pod := s.observed.Pod(target)
	if pod == nil {
		return nil, nil
	}
	pending := strings.Join(s.observed.Reports[target].PendingRestart, ", ")
	switch err := r.agents().Restart(ctx, r.endpoint(s, pod)); {
	case errors.Is(err, agentapi.ErrRestartInProgress):
		// Already restarting; look again shortly.
	case err != nil:
		return nil, fmt.Errorf("restart %s: %w", target, err)
	default:
		r.event(s.cluster, pod, corev1.EventTypeNormal, "InstanceRestarted", "Restart", "Restarting %s to apply %s", target, pending)
	}
	return waitFor("RollingRestart", fmt.Sprintf("restarting %s to apply %s", target, pending)), nil
}

// nextRestart is the instance to restart for settings pending a restart: the first replica by
// ordinal, the primary once no replica waits, "" when none waits. The kubelet projects a
// ConfigMap change into each pod at its own time: while a replica has not loaded the desired
// configuration yet, it may be about to need a restart too, so the primary waits for it
// (behind names it). Agents that do not report a hash are taken as up to date.
func nextRestart(reports map[string]*agentapi.Status, primary, desiredHash string) (target, behind string) {
	var replicas, stale []string
	primaryPending := false
	for name, report := range reports {
		switch {
		case name == primary:
			primaryPending = len(report.PendingRestart) > 0
		case report.Role != agentapi.RoleReplica:
		case len(report.PendingRestart) > 0:
			replicas = append(replicas, name)
		case report.ConfigHash != "" && report.ConfigHash != desiredHash:
			stale = append(stale, name)
		}
	}
	if len(replicas) > 0 {
		slices.SortFunc(replicas, ha.CompareNames)
		return replicas[0], ""
	}
	if !primaryPending {
		return "", ""
	}
	if len(stale) > 0 {
		slices.SortFunc(stale, ha.CompareNames)
		return "", stale[0]
	}
	return primary, ""
}
