package controller

import (
	"context"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

// AgentClient is what the reconciler asks of instance agents: agentapi.HTTPClient in the
// manager, a fake in unit tests.
type AgentClient interface {
	Status(ctx context.Context, e agentapi.Endpoint) (*agentapi.Status, error)
	DropSlots(ctx context.Context, e agentapi.Endpoint, slots []string) ([]string, error)
	Restart(ctx context.Context, e agentapi.Endpoint) error
	Promote(ctx context.Context, e agentapi.Endpoint, slots []string) (*agentapi.PromoteResponse, error)
	Demote(ctx context.Context, e agentapi.Endpoint) (*agentapi.DemoteResponse, error)
	Fence(ctx context.Context, e agentapi.Endpoint) (*agentapi.Status, error)
}

// AgentAddress is where an instance pod's agent listens: its pod IP and the agent port.
func AgentAddress(pod *corev1.Pod) string {
	if pod.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(agentapi.DefaultAgentPort))
}

func (r *PostgresClusterReconciler) agents() AgentClient {
	if r.Agents != nil {
		return r.Agents
	}
	return agentapi.HTTPClient{}
}

func (r *PostgresClusterReconciler) agentAddress(pod *corev1.Pod) string {
	if r.AgentAddress != nil {
		return r.AgentAddress(pod)
	}
	return AgentAddress(pod)
}
