package agent

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The primary's agent keeps the roles and databases the operator declared (PathCatalog) and goes
// over them again every CatalogDriftInterval: a pass that finds the server as declared runs no
// statement, one that finds a settled item changed by hand puts it back and reports the drift. Passes run
// one at a time, outside the supervisor loop, which must keep noticing a frozen server.

// catalogPassTimeout bounds one pass over every declared role and database.
const catalogPassTimeout = 30 * time.Second

type managedRoles struct {
	// requestMu guards request, the set the operator last gave.
	requestMu sync.Mutex
	request   *agentapi.CatalogRequest
	// passMu makes passes one at a time; it guards settled, the declarations the server had
	// without error after a pass: the same declaration needing changes later is drift.
	passMu           sync.Mutex
	settled          map[string]agentapi.ManagedRole
	settledDatabases map[string]agentapi.ManagedDatabase
	// quietDatabases spares a pass the connection to a database nothing was written in since
	// it was read as declared.
	quietDatabases postgres.QuietDatabases
	report         atomic.Pointer[agentapi.CatalogReport]
	lastPass       atomic.Pointer[time.Time]
	// ctx is the supervisor's: passes outlive the request that started them.
	ctx atomic.Pointer[context.Context]
}

// ApplyCatalog takes the operator's declared roles and applies them in the background.
func (a *Agent) ApplyCatalog(req agentapi.CatalogRequest) error {
	if !a.isPrimary() {
		return fmt.Errorf("%w: managed roles are applied on the primary", agentapi.ErrWrongRole)
	}
	a.managed.requestMu.Lock()
	a.managed.request = &req
	a.managed.requestMu.Unlock()
	a.startCatalogPass()
	return nil
}

func (a *Agent) heldRoles() *agentapi.CatalogRequest {
	a.managed.requestMu.Lock()
	defer a.managed.requestMu.Unlock()
	return a.managed.request
}

// CatalogReport is the latest pass's report; nil before the first.
func (a *Agent) CatalogReport() *agentapi.CatalogReport { return a.managed.report.Load() }

// rolesState is what Status says of the managed roles.
func (a *Agent) catalogState() *agentapi.CatalogState {
	held := a.heldRoles()
	if held == nil {
		return nil
	}
	return &agentapi.CatalogState{Fingerprint: held.Fingerprint, Report: a.managed.report.Load().ID()}
}

// checkCatalogDrift starts a pass over the declared roles when the last is CatalogDriftInterval old,
// or none ran yet for a set taken before the supervisor loop started.
func (a *Agent) checkCatalogDrift(now time.Time) {
	interval := a.Options.CatalogDriftInterval
	if interval == 0 {
		interval = agentapi.CatalogDriftInterval
	}
	if last := a.managed.lastPass.Load(); a.heldRoles() != nil && (last == nil || now.Sub(*last) >= interval) {
		a.startCatalogPass()
	}
}

// startCatalogPass runs passes in the background, on the primary, until one covered the held
// request; nothing when one runs already (it takes the newer request next).
func (a *Agent) startCatalogPass() {
	ctx := a.managed.ctx.Load()
	if ctx == nil || !a.isPrimary() || !a.managed.passMu.TryLock() {
		return
	}
	go func() {
		defer a.managed.passMu.Unlock()
		for {
			req := a.heldRoles()
			report, err := a.catalogPass(*ctx, req)
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

// catalogPass runs req once; passMu is held.
func (a *Agent) catalogPass(ctx context.Context, req *agentapi.CatalogRequest) (*agentapi.CatalogReport, error) {
	if req == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, catalogPassTimeout)
	defer cancel()
	now := time.Now()
	a.managed.lastPass.Store(&now)
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("managed roles: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	roles, roleStatements, err := a.reconcileRoles(ctx, conn, req)
	if err != nil {
		return nil, err
	}
	databases, databaseStatements, err := a.reconcileDatabases(ctx, conn, req)
	if err != nil {
		return nil, err
	}
	report := &agentapi.CatalogReport{Fingerprint: req.Fingerprint, Generation: 1, Statements: roleStatements + databaseStatements,
		Roles: roles, Databases: databases}
	if previous := a.managed.report.Load(); previous != nil {
		report.Generation = previous.Generation
		if previous.Fingerprint != report.Fingerprint || !reflect.DeepEqual(previous.Roles, report.Roles) ||
			!reflect.DeepEqual(previous.Databases, report.Databases) {
			report.Generation++
		}
	}
	a.managed.report.Store(report)
	return report, nil
}

// reconcileRoles is the roles' part of a pass; passMu is held.
func (a *Agent) reconcileRoles(ctx context.Context, conn *pgx.Conn, req *agentapi.CatalogRequest) ([]agentapi.RoleResult, int, error) {
	settled := settledOf(req.Roles, func(r agentapi.ManagedRole) string { return r.Name }, a.managed.settled)
	results, statements, err := postgres.ReconcileRoles(ctx, conn, *req, settled)
	if err != nil {
		return nil, 0, fmt.Errorf("managed roles: %w", err)
	}
	a.managed.settled = map[string]agentapi.ManagedRole{}
	for i, result := range results {
		settle(a.Log, a.managed.settled, "role", result.Name, result.State, result.Changed, req.Roles[i])
	}
	return results, statements, nil
}

// reconcileDatabases is the databases' part of a pass, after the roles that own them; passMu is
// held.
func (a *Agent) reconcileDatabases(ctx context.Context, conn *pgx.Conn, req *agentapi.CatalogRequest) ([]agentapi.DatabaseResult, int, error) {
	if len(req.Databases) == 0 {
		return nil, 0, nil
	}
	settled := settledOf(req.Databases, func(d agentapi.ManagedDatabase) string { return d.Name }, a.managed.settledDatabases)
	if a.managed.quietDatabases == nil {
		a.managed.quietDatabases = postgres.QuietDatabases{}
	}
	results, statements, err := postgres.ReconcileDatabases(ctx, conn, a.connectTo, *req, settled, a.managed.quietDatabases)
	if err != nil {
		return nil, 0, fmt.Errorf("managed databases: %w", err)
	}
	a.managed.settledDatabases = map[string]agentapi.ManagedDatabase{}
	for i, result := range results {
		settle(a.Log, a.managed.settledDatabases, "database", result.Name, result.State, result.Changed, req.Databases[i])
	}
	return results, statements, nil
}

// settledOf says, by name, which declarations are the ones settled in the last pass: one of
// those that needs changes drifted.
func settledOf[T any](declared []T, name func(T) string, previous map[string]T) map[string]bool {
	settled := map[string]bool{}
	for _, item := range declared {
		last, ok := previous[name(item)]
		settled[name(item)] = ok && reflect.DeepEqual(last, item)
	}
	return settled
}

// settle remembers a declaration the server had without error after the pass, and logs drift.
func settle[T any](log logr.Logger, settled map[string]T, kind, name, state string, changed []string, declared T) {
	if state != agentapi.RoleError {
		settled[name] = declared
	}
	if state == agentapi.RoleDrift {
		log.Info("managed "+kind+" changed by hand; put back", kind, name, "changed", changed)
	}
}
