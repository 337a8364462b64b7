package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
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
	Detach(ctx context.Context, e agentapi.Endpoint, from string) (*agentapi.Status, error)
	Attach(ctx context.Context, e agentapi.Endpoint) error
}

// MajorUpgradeAgents is what a major upgrade asks of the instance agents (background jobs,
// started and then polled).
type MajorUpgradeAgents interface {
	StartMajorUpgradeCheck(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeCheckRequest) (*agentapi.MajorUpgradeCheckResult, error)
	MajorUpgradeCheck(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeCheckResult, error)
	StartMajorUpgrade(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRequest) (*agentapi.MajorUpgradeResult, error)
	MajorUpgrade(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeResult, error)
	StartMajorUpgradeRebuild(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRebuildRequest) (*agentapi.MajorUpgradeRebuildResult, error)
	MajorUpgradeRebuild(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeRebuildResult, error)
}

func (r *PostgresClusterReconciler) upgradeAgents() MajorUpgradeAgents {
	if r.UpgradeAgents != nil {
		return measuredUpgradeAgents{r.UpgradeAgents}
	}
	return measuredUpgradeAgents{agentapi.HTTPClient{}}
}

// measuredUpgradeAgents records each request as measuredAgents does.
type measuredUpgradeAgents struct{ inner MajorUpgradeAgents }

func measured[T any](name string, call func() (T, error)) (result T, err error) {
	defer func(start time.Time) { agentclient.Record(name, start, err) }(time.Now())
	return call()
}

func (m measuredUpgradeAgents) StartMajorUpgradeCheck(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeCheckRequest) (*agentapi.MajorUpgradeCheckResult, error) {
	return measured("majorupgradecheck", func() (*agentapi.MajorUpgradeCheckResult, error) { return m.inner.StartMajorUpgradeCheck(ctx, e, req) })
}

func (m measuredUpgradeAgents) MajorUpgradeCheck(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeCheckResult, error) {
	return measured("majorupgradecheck", func() (*agentapi.MajorUpgradeCheckResult, error) { return m.inner.MajorUpgradeCheck(ctx, e) })
}

func (m measuredUpgradeAgents) StartMajorUpgrade(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRequest) (*agentapi.MajorUpgradeResult, error) {
	return measured("majorupgrade", func() (*agentapi.MajorUpgradeResult, error) { return m.inner.StartMajorUpgrade(ctx, e, req) })
}

func (m measuredUpgradeAgents) MajorUpgrade(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeResult, error) {
	return measured("majorupgrade", func() (*agentapi.MajorUpgradeResult, error) { return m.inner.MajorUpgrade(ctx, e) })
}

func (m measuredUpgradeAgents) StartMajorUpgradeRebuild(ctx context.Context, e agentapi.Endpoint, req agentapi.MajorUpgradeRebuildRequest) (*agentapi.MajorUpgradeRebuildResult, error) {
	return measured("majorupgraderebuild", func() (*agentapi.MajorUpgradeRebuildResult, error) {
		return m.inner.StartMajorUpgradeRebuild(ctx, e, req)
	})
}

func (m measuredUpgradeAgents) MajorUpgradeRebuild(ctx context.Context, e agentapi.Endpoint) (*agentapi.MajorUpgradeRebuildResult, error) {
	return measured("majorupgraderebuild", func() (*agentapi.MajorUpgradeRebuildResult, error) { return m.inner.MajorUpgradeRebuild(ctx, e) })
}

func (r *PostgresClusterReconciler) agents() AgentClient {
	if r.Agents != nil {
		return measuredAgents{r.Agents}
	}
	return measuredAgents{agentapi.HTTPClient{}}
}

// measuredAgents records each request's outcome and latency (pgpilot_agent_requests_total,
// pgpilot_agent_request_duration_seconds).
type measuredAgents struct{ inner AgentClient }

func (m measuredAgents) Status(ctx context.Context, e agentapi.Endpoint) (status *agentapi.Status, err error) {
	defer func(start time.Time) { agentclient.Record("status", start, err) }(time.Now())
	return m.inner.Status(ctx, e)
}

func (m measuredAgents) DropSlots(ctx context.Context, e agentapi.Endpoint, slots []string) (dropped []string, err error) {
	defer func(start time.Time) { agentclient.Record("dropslots", start, err) }(time.Now())
	return m.inner.DropSlots(ctx, e, slots)
}

func (m measuredAgents) Restart(ctx context.Context, e agentapi.Endpoint) (err error) {
	defer func(start time.Time) { agentclient.Record("restart", start, err) }(time.Now())
	return m.inner.Restart(ctx, e)
}

func (m measuredAgents) Promote(ctx context.Context, e agentapi.Endpoint, slots []string) (answer *agentapi.PromoteResponse, err error) {
	defer func(start time.Time) { agentclient.Record("promote", start, err) }(time.Now())
	return m.inner.Promote(ctx, e, slots)
}

func (m measuredAgents) Demote(ctx context.Context, e agentapi.Endpoint) (answer *agentapi.DemoteResponse, err error) {
	defer func(start time.Time) { agentclient.Record("demote", start, err) }(time.Now())
	return m.inner.Demote(ctx, e)
}

func (m measuredAgents) Fence(ctx context.Context, e agentapi.Endpoint) (status *agentapi.Status, err error) {
	defer func(start time.Time) { agentclient.Record("fence", start, err) }(time.Now())
	return m.inner.Fence(ctx, e)
}

func (m measuredAgents) Detach(ctx context.Context, e agentapi.Endpoint, from string) (status *agentapi.Status, err error) {
	defer func(start time.Time) { agentclient.Record("detach", start, err) }(time.Now())
	return m.inner.Detach(ctx, e, from)
}

func (m measuredAgents) Attach(ctx context.Context, e agentapi.Endpoint) (err error) {
	defer func(start time.Time) { agentclient.Record("attach", start, err) }(time.Now())
	return m.inner.Attach(ctx, e)
}

func (r *PostgresClusterReconciler) agentAddress(pod *corev1.Pod) string {
	if r.AgentAddress != nil {
		return r.AgentAddress(pod)
	}
	return agentclient.Address(pod)
}
