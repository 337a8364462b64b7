package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// ReconcileRoles brings the server's roles in line with the declared ones, each role in its own
// transactions: one the server refuses is reported and the others are applied all the same. A
// role whose declaration is the one settled in an earlier pass and that needed changes drifted:
// someone changed it by hand. It returns each role's result and how many statements ran (none
// when the server already has every role as declared).
func ReconcileRoles(ctx context.Context, conn *pgx.Conn, req agentapi.CatalogRequest, settled map[string]bool) ([]agentapi.RoleResult, int, error) {
	rules, err := roleRulesOf(ctx, conn, req.Forbidden)
	if err != nil {
		return nil, 0, err
	}
	names := make([]string, 0, len(req.Roles))
	for _, role := range req.Roles {
		names = append(append(names, role.Name), role.InRoles...)
	}
	existing, err := readRoles(ctx, conn, names)
	if err != nil {
		return nil, 0, err
	}
	plans := make([]rolePlan, len(req.Roles))
	failed := make([]error, len(req.Roles))
	for i, role := range req.Roles {
		plans[i] = planRole(role, existing[role.Name], existing, rules, ScramVerifier)
	}
	statements := 0
	// Every role's attributes before any membership, which may name a role made in this pass;
	// drops last, after the memberships that named them were revoked.
	for _, phase := range []func(rolePlan) []string{
		func(p rolePlan) []string { return p.attributes },
		func(p rolePlan) []string { return p.memberships },
		func(p rolePlan) []string { return nonEmpty(p.drop) },
	} {
		for i, plan := range plans {
			if plan.refused != "" || failed[i] != nil || len(phase(plan)) == 0 {
				continue
			}
			statements += len(phase(plan))
			failed[i] = execUnlogged(ctx, conn, phase(plan)...) // a password's verifier may be among them
		}
	}
	results := make([]agentapi.RoleResult, len(req.Roles))
	for i, role := range req.Roles {
		results[i] = roleResult(role.Name, plans[i], failed[i], settled[role.Name])
	}
	return results, statements, nil
}

func roleResult(name string, plan rolePlan, failed error, settled bool) agentapi.RoleResult {
	switch {
	case plan.refused != "":
		return agentapi.RoleResult{Name: name, State: agentapi.RoleError, Message: plan.refused}
	case failed != nil:
		return agentapi.RoleResult{Name: name, State: agentapi.RoleError, Changed: plan.changed, Message: failed.Error()}
	case settled && len(plan.changed) > 0:
		return agentapi.RoleResult{Name: name, State: agentapi.RoleDrift, Changed: plan.changed}
	}
	return agentapi.RoleResult{Name: name, State: agentapi.RoleApplied, Changed: plan.changed}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func roleRulesOf(ctx context.Context, conn *pgx.Conn, forbidden []string) (roleRules, error) {
	var versionNum string
	if err := conn.QueryRow(ctx, "SHOW server_version_num").Scan(&versionNum); err != nil {
		return roleRules{}, fmt.Errorf("server version: %w", err)
	}
	n, err := strconv.Atoi(versionNum)
	if err != nil {
		return roleRules{}, fmt.Errorf("server version %q: %w", versionNum, err)
	}
	major := n / 10000
	return roleRules{Forbidden: forbidden, Major: major, ByGrantor: major >= 16}, nil
}

// readRoles reads the named roles that exist, with their memberships and who granted them.
func readRoles(ctx context.Context, conn *pgx.Conn, names []string) (map[string]*existingRole, error) {
	rows, err := conn.Query(ctx, `SELECT r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb,
		r.rolcanlogin, r.rolreplication, r.rolbypassrls, r.rolconnlimit,
		CASE WHEN r.rolvaliduntil = 'infinity' THEN NULL ELSE r.rolvaliduntil END,
		COALESCE(r.rolpassword, ''), COALESCE(shobj_description(r.oid, 'pg_authid'), '')
		FROM pg_authid r WHERE r.rolname = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	roles := map[string]*existingRole{}
	for rows.Next() {
		var name string
		var until pgtype.Timestamptz
		r := &existingRole{MemberOf: map[string][]string{}}
		if err := rows.Scan(&name, &r.Superuser, &r.Inherit, &r.CreateRole, &r.CreateDB, &r.Login, &r.Replication,
			&r.BypassRLS, &r.ConnectionLimit, &until, &r.Verifier, &r.Comment); err != nil {
			return nil, fmt.Errorf("read roles: %w", err)
		}
		if until.Valid {
			t := until.Time
			r.ValidUntil = &t
		}
		roles[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT member.rolname, g.rolname, COALESCE(grantor.rolname, '')
		FROM pg_auth_members m JOIN pg_roles member ON member.oid = m.member JOIN pg_roles g ON g.oid = m.roleid
		LEFT JOIN pg_roles grantor ON grantor.oid = m.grantor
		WHERE member.rolname = ANY($1) ORDER BY 1, 2, 3`, names)
	if err != nil {
		return nil, fmt.Errorf("read role memberships: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var member, group, grantor string
		if err := rows.Scan(&member, &group, &grantor); err != nil {
			return nil, fmt.Errorf("read role memberships: %w", err)
		}
		roles[member].MemberOf[group] = append(roles[member].MemberOf[group], grantor)
	}
	return roles, rows.Err()
}
