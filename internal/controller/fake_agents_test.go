package controller

import (
	"context"
	"fmt"
	"sync"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// fakeAgents answers as agents would, by address, and records what the reconciler asked.
type fakeAgents struct {
	mu       sync.Mutex
	reports  map[string]*agentapi.Status
	busy     map[string]bool // a restart is already running there
	restarts []string
	drops    map[string][]string
	// promoted and demoted are the addresses asked to change role, in order.
	promoted, demoted, fenced []string
	promotedSlots             []string
	// detached are the addresses ordered to detach, by the primary named; detachedMillis what
	// they answer; attached the addresses told to attach, in order.
	detached       map[string]string
	detachedMillis int64
	attached       []string
}

func newFakeAgents() *fakeAgents {
	return &fakeAgents{reports: map[string]*agentapi.Status{}, busy: map[string]bool{}, drops: map[string][]string{}, detached: map[string]string{}}
}

func (f *fakeAgents) Status(_ context.Context, e agentapi.Endpoint) (*agentapi.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.reports[e.Address]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("connection refused")
}

func (f *fakeAgents) DropSlots(_ context.Context, e agentapi.Endpoint, slots []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drops[e.Address] = append(f.drops[e.Address], slots...)
	return slots, nil
}

func (f *fakeAgents) Promote(_ context.Context, e agentapi.Endpoint, slots []string) (*agentapi.PromoteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.promoted = append(f.promoted, e.Address)
	f.promotedSlots = slots
	return &agentapi.PromoteResponse{Timeline: 2}, nil
}

func (f *fakeAgents) Demote(_ context.Context, e agentapi.Endpoint) (*agentapi.DemoteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.demoted = append(f.demoted, e.Address)
	return &agentapi.DemoteResponse{ShutdownLSN: "0/3000100", Clean: true}, nil
}

func (f *fakeAgents) Fence(_ context.Context, e agentapi.Endpoint) (*agentapi.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.reports[e.Address]; !ok {
		return nil, fmt.Errorf("connection refused")
	}
	f.fenced = append(f.fenced, e.Address)
	return &agentapi.Status{Fenced: true, FencedReason: "fenced by the operator"}, nil
}

func (f *fakeAgents) Restart(_ context.Context, e agentapi.Endpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy[e.Address] {
		return agentapi.ErrRestartInProgress
	}
	f.restarts = append(f.restarts, e.Address)
	return nil
}

func (f *fakeAgents) Detach(_ context.Context, e agentapi.Endpoint, from string) (*agentapi.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	report, ok := f.reports[e.Address]
	switch {
	case !ok:
		return nil, fmt.Errorf("connection refused")
	case report.Role != agentapi.RoleReplica:
		return nil, agentapi.ErrWrongRole
	}
	f.detached[e.Address] = from
	return &agentapi.Status{Role: agentapi.RoleReplica, DetachedFrom: from, DetachedMillis: f.detachedMillis}, nil
}

func (f *fakeAgents) Attach(_ context.Context, e agentapi.Endpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.reports[e.Address]; !ok {
		return fmt.Errorf("connection refused")
	}
	f.attached = append(f.attached, e.Address)
	delete(f.detached, e.Address)
	return nil
}
