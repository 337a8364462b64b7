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
	// requestMu guards request, the set the operator last gave.
	requestMu sync.Mutex
	request   *agentapi.RolesRequest
	// passMu makes passes one at a time; it guards settled, the declarations the server had
	// without error after a pass: the same declaration needing changes later is drift.
	passMu   sync.Mutex
	settled  map[string]agentapi.ManagedRole
	report   atomic.Pointer[agentapi.RolesReport]
	lastPass atomic.Pointer[time.Time]
	// ctx is the supervisor's: passes outlive the request that started them.
	ctx atomic.Pointer[context.Context]
}

// ApplyRoles takes the operator's declared roles and applies them in the background.
func (a *Agent) ApplyRoles(req agentapi.RolesRequest) error {
	if !a.isPrimary() {
		return fmt.Errorf("%w: managed roles are applied on the primary", agentapi.ErrWrongRole)
	}
	a.managed.requestMu.Lock()
	a.managed.request = &req
	a.managed.requestMu.Unlock()
	a.startRolesPass()
	return nil
}

func (a *Agent) heldRoles() *agentapi.RolesRequest {
	a.managed.requestMu.Lock()
	defer a.managed.requestMu.Unlock()
	return a.managed.request
}

// RolesReport is the latest pass's report; nil before the first.
func (a *Agent) RolesReport() *agentapi.RolesReport { return a.managed.report.Load() }

// rolesState is what Status says of the managed roles.
func (a *Agent) rolesState() *agentapi.RolesState {
	held := a.heldRoles()
	if held == nil {
		return nil
	}
	return &agentapi.RolesState{Fingerprint: held.Fingerprint, Report: a.managed.report.Load().ID()}
}

// checkRoleDrift starts a pass over the declared roles when the last is RolesDriftInterval old,
// or none ran yet for a set taken before the supervisor loop started.
func (a *Agent) checkRoleDrift(now time.Time) {
	interval := a.Options.RolesDriftInterval
	if interval == 0 {
		interval = agentapi.RolesDriftInterval
	}
	if last := a.managed.lastPass.Load(); a.heldRoles() != nil && (last == nil || now.Sub(*last) >= interval) {
		a.startRolesPass()
	}
}

// startRolesPass runs passes in the background, on the primary, until one covered the held
// request; nothing when one runs already (it takes the newer request next).
func (a *Agent) startRolesPass() {
	ctx := a.managed.ctx.Load()
	if ctx == nil || !a.isPrimary() || !a.managed.passMu.TryLock() {
		return
	}
	go func() {
		defer a.managed.passMu.Unlock()
		for {
			req := a.heldRoles()
			report, err := a.rolesPass(*ctx, req)
			if err != nil {
				a.Log.Error(err, "managed roles: pass failed; the next runs in a minute")
				return
			}
			if held := a.heldRoles(); held == nil || held == req || report == nil {
				return
			}
		}
	}()
}

// rolesPass runs req once; passMu is held.
func (a *Agent) rolesPass(ctx context.Context, req *agentapi.RolesRequest) (*agentapi.RolesReport, error) {
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
