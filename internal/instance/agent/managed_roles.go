package agent

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The primary's agent keeps the roles the operator declared (PathRoles) and goes over them
// again every RolesDriftInterval: a pass that finds the server as declared runs no statement,
// one that finds a settled role changed by hand puts it back and reports the drift. Passes run
// one at a time, outside the supervisor loop, which must keep noticing a frozen server.

// rolesPassTimeout bounds one pass over every declared role.
const rolesPassTimeout = 30 * time.Second

type managedRoles struct {
	// passMu makes passes one at a time; it guards request and settled.
	passMu  sync.Mutex
	request *agentapi.RolesRequest
	// settled are the declarations the server had without error after a pass: the same
	// declaration needing changes later is drift.
	settled  map[string]agentapi.ManagedRole
	report   atomic.Pointer[agentapi.RolesReport]
	lastPass atomic.Pointer[time.Time]
}

// ApplyRoles takes the operator's declared roles and brings the server in line at once.
func (a *Agent) ApplyRoles(ctx context.Context, req agentapi.RolesRequest) (*agentapi.RolesReport, error) {
	if !a.isPrimary() {
		return nil, fmt.Errorf("%w: managed roles are applied on the primary", agentapi.ErrWrongRole)
	}
	a.managed.passMu.Lock()
	defer a.managed.passMu.Unlock()
	a.managed.request = &req
	return a.rolesPass(ctx)
}

// RolesReport is the latest pass's report; nil before the first.
func (a *Agent) RolesReport() *agentapi.RolesReport { return a.managed.report.Load() }

// rolesState is what Status says of the managed roles.
func (a *Agent) rolesState() *agentapi.RolesState {
	report := a.managed.report.Load()
	if report == nil {
		return nil
	}
	return &agentapi.RolesState{Fingerprint: report.Fingerprint, Generation: report.Generation}
}

// checkRoleDrift starts a pass over the declared roles when the last is RolesDriftInterval old,
// on the primary, unless one runs.
func (a *Agent) checkRoleDrift(ctx context.Context, now time.Time) {
	last := a.managed.lastPass.Load()
	if last == nil || now.Sub(*last) < agentapi.RolesDriftInterval || !a.isPrimary() || !a.managed.passMu.TryLock() {
		return
	}
	go func() {
		defer a.managed.passMu.Unlock()
		if _, err := a.rolesPass(ctx); err != nil {
			a.Log.Error(err, "managed roles: drift pass")
		}
	}()
}

// rolesPass runs the held request once; passMu is held.
func (a *Agent) rolesPass(ctx context.Context) (*agentapi.RolesReport, error) {
	req := a.managed.request
	if req == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rolesPassTimeout)
	defer cancel()
	now := time.Now()
	a.managed.lastPass.Store(&now)
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("managed roles: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	settled := map[string]bool{}
	for _, role := range req.Roles {
		previous, ok := a.managed.settled[role.Name]
		settled[role.Name] = ok && reflect.DeepEqual(previous, role)
	}
	results, statements, err := postgres.ReconcileRoles(ctx, conn, *req, settled)
	if err != nil {
		return nil, fmt.Errorf("managed roles: %w", err)
	}
	a.managed.settled = map[string]agentapi.ManagedRole{}
	for i, result := range results {
		if result.State != agentapi.RoleError {
			a.managed.settled[result.Name] = req.Roles[i]
		}
		if result.State == agentapi.RoleDrift {
			a.Log.Info("managed role changed by hand; put back", "role", result.Name, "changed", result.Changed)
		}
	}
	report := &agentapi.RolesReport{Fingerprint: req.Fingerprint, Generation: 1, Statements: statements, Roles: results}
	if previous := a.managed.report.Load(); previous != nil {
		report.Generation = previous.Generation
		if previous.Fingerprint != report.Fingerprint || !reflect.DeepEqual(previous.Roles, report.Roles) {
			report.Generation++
		}
	}
	a.managed.report.Store(report)
	return report, nil
}
