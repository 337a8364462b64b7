package pgtest

import (
	"context"
	"strconv"
	"sync"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// MemoryLeases is a primary Lease in memory, with the API server's compare-and-swap on every
// write, for agent tests that run without an API server (the controller's envtest specs use
// agent.KubeLeases against a real one). Grant plays the operator; Fail makes every call fail
// as an unreachable API server would.
type MemoryLeases struct {
	mu          sync.Mutex
	holder      string
	transitions int32
	version     int
	failing     bool
}

// NewMemoryLeases is a Lease naming holder, never granted since.
func NewMemoryLeases(holder string) *MemoryLeases { return &MemoryLeases{holder: holder} }

var errUnreachable = context.DeadlineExceeded

func (m *MemoryLeases) Get(context.Context) (agent.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return agent.Lease{}, errUnreachable
	}
	return m.lease(), nil
}

func (m *MemoryLeases) Renew(_ context.Context, l agent.Lease, holder string) (agent.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return agent.Lease{}, errUnreachable
	}
	if l.Version != strconv.Itoa(m.version) {
		return agent.Lease{}, agent.ErrLeaseConflict
	}
	m.holder = holder
	m.version++
	return m.lease(), nil
}

// Grant gives the Lease to holder, as the operator does on a failover.
func (m *MemoryLeases) Grant(holder string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holder = holder
	m.transitions++
	m.version++
}

// Holder is who holds the Lease now.
func (m *MemoryLeases) Holder() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holder
}

// Fail makes the Lease unreachable (true) or reachable again (false).
func (m *MemoryLeases) Fail(failing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failing = failing
}

func (m *MemoryLeases) lease() agent.Lease {
	return agent.Lease{Holder: m.holder, Transitions: m.transitions, Version: strconv.Itoa(m.version)}
}
