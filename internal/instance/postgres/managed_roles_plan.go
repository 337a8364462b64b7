package postgres

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// existingRole is a role as the server's catalogs have it.
type existingRole struct {
	Superuser, Inherit, CreateRole, CreateDB, Login, Replication, BypassRLS bool
	ConnectionLimit                                                         int32
	// ValidUntil is nil for no expiry (NULL or infinity).
	ValidUntil *time.Time
	// Verifier is pg_authid.rolpassword; "" without a password.
	Verifier string
	Comment  string
	// MemberOf maps each role it is a member of to the roles that granted the membership.
	MemberOf map[string][]string
}

// rolePlan is what makes one role as declared, in the order the pass runs it: the role and its
// attributes first (every role, so that memberships find the roles they name), then its
// memberships, and drops last.
type rolePlan struct {
	attributes  []string
	memberships []string
	drop        string
	// changed names what differs, for the report: "created", "login", "password", "member of x".
	changed []string
	// refused says why the role may not be made as declared; nothing is run for it.
	refused string
}

// serverRoles are what no managed role may be a member of: their members can run programs or
// read and write files as the server's OS user, which is as good as a superuser.
var serverRoles = []string{"pg_execute_server_program", "pg_read_server_files", "pg_write_server_files"}

// roleRules are what the pass checks a declared role against before planning it.
type roleRules struct {
	// Forbidden names are the application owner's and the like (CatalogRequest.Forbidden).
	Forbidden []string
	// Major is the server's major version: CREATEROLE before 16 may grant itself any role but a
	// superuser, server-program roles among them.
	Major int
	// Revoke by grantor (GRANTED BY, from 16): a superuser's REVOKE otherwise removes only its
	// own grants of a membership.
	ByGrantor bool
}

// planRole is what brings have (nil when the role does not exist) to want. existing holds the
// other roles the declared memberships name, to refuse a superuser's.
func planRole(want agentapi.ManagedRole, have *existingRole, existing map[string]*existingRole, rules roleRules, verifier func(string) (string, error)) rolePlan {
	if reason := refuseRole(want, have, existing, rules); reason != "" {
		return rolePlan{refused: reason}
	}
	name := pgx.Identifier{want.Name}.Sanitize()
	if want.Absent {
		if have == nil {
			return rolePlan{}
		}
		return rolePlan{drop: "DROP ROLE " + name, changed: []string{changedDropped}}
	}
	var plan rolePlan
	options, changed := attributeChanges(want, have)
	password, passwordChanged, err := passwordOption(want, have, verifier)
	if err != nil {
		return rolePlan{refused: err.Error()}
	}
	if passwordChanged {
		options, changed = append(options, password), append(changed, "password")
	}
	switch {
	case have == nil:
		plan.attributes = append(plan.attributes, "CREATE ROLE "+name+" WITH "+strings.Join(options, " "))
		changed = []string{changedCreated}
	case len(options) > 0:
		plan.attributes = append(plan.attributes, "ALTER ROLE "+name+" WITH "+strings.Join(options, " "))
	}
	if have == nil && want.Comment != "" || have != nil && have.Comment != want.Comment {
		comment := "NULL"
		if want.Comment != "" {
			comment = quoteLiteral(want.Comment)
		}
		plan.attributes = append(plan.attributes, "COMMENT ON ROLE "+name+" IS "+comment)
		if have != nil {
			changed = append(changed, "comment")
		}
	}
	plan.memberships, plan.changed = membershipChanges(want, have, rules), changed
	for _, group := range want.InRoles {
		if have == nil || have.MemberOf[group] == nil {
			plan.changed = append(plan.changed, "member of "+group)
		}
	}
	if have != nil {
		for _, group := range sortedKeys(have.MemberOf) {
			if !slices.Contains(want.InRoles, group) {
				plan.changed = append(plan.changed, "not member of "+group)
			}
		}
	}
	return plan
}

func refuseRole(want agentapi.ManagedRole, have *existingRole, existing map[string]*existingRole, rules roleRules) string {
	switch {
	case agentapi.ReservedRole(want.Name) || slices.Contains(rules.Forbidden, want.Name):
		return fmt.Sprintf("%s is a role pgpilot manages or PostgreSQL reserves", want.Name)
	case have != nil && have.Superuser:
		return fmt.Sprintf("%s is a superuser: pgpilot manages no superuser and changes nothing of it", want.Name)
	case want.Absent:
		return ""
	case want.CreateRole && rules.Major < 16:
		return fmt.Sprintf("createrole on PostgreSQL %d lets the role grant itself any role but a superuser, %s among them", rules.Major, serverRoles[0])
	}
	for _, group := range want.InRoles {
		switch {
		case group == want.Name:
			return "a role cannot be a member of itself"
		case group == agentapi.Superuser || group == agentapi.DefaultReplicationUser || group == agentapi.MonitorUser ||
			slices.Contains(rules.Forbidden, group) || slices.Contains(serverRoles, group):
			return fmt.Sprintf("member of %s: a role pgpilot manages, or one whose members act as the server's OS user", group)
		case existing[group] != nil && existing[group].Superuser:
			return fmt.Sprintf("member of %s: a superuser", group)
		}
	}
	return ""
}

// attributeChanges are the role options that differ, every one of them for a new role. A managed
// role is never a superuser, a replication role or above row security: a hand-made change to
// those is drift, put back.
func attributeChanges(want agentapi.ManagedRole, have *existingRole) (options, changed []string) {
	for _, a := range []struct {
		option string
		wanted bool
		had    func(existingRole) bool
	}{
		{"SUPERUSER", false, func(r existingRole) bool { return r.Superuser }},
		{"LOGIN", want.Login, func(r existingRole) bool { return r.Login }},
		{"INHERIT", want.Inherit, func(r existingRole) bool { return r.Inherit }},
		{"CREATEDB", want.CreateDB, func(r existingRole) bool { return r.CreateDB }},
		{"CREATEROLE", want.CreateRole, func(r existingRole) bool { return r.CreateRole }},
		{"REPLICATION", false, func(r existingRole) bool { return r.Replication }},
		{"BYPASSRLS", false, func(r existingRole) bool { return r.BypassRLS }},
	} {
		if have != nil && a.had(*have) == a.wanted {
			continue
		}
		if a.wanted {
			options = append(options, a.option)
		} else {
			options = append(options, "NO"+a.option)
		}
		changed = append(changed, strings.ToLower(a.option))
	}
	if have == nil || have.ConnectionLimit != want.ConnectionLimit {
		options, changed = append(options, fmt.Sprintf("CONNECTION LIMIT %d", want.ConnectionLimit)), append(changed, "connectionLimit")
	}
	if have == nil || !sameExpiry(have.ValidUntil, want.ValidUntil) {
		until := "'infinity'"
		if want.ValidUntil != nil {
			until = quoteLiteral(want.ValidUntil.UTC().Format(time.RFC3339))
		}
		options, changed = append(options, "VALID UNTIL "+until), append(changed, "validUntil")
	}
	return options, changed
}

func sameExpiry(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Unix() == b.Unix()
}

// passwordOption sets the Secret's password when the role's verifier is not of it, or removes
// the password when the spec says so; without either, the role keeps the one it has.
func passwordOption(want agentapi.ManagedRole, have *existingRole, verifier func(string) (string, error)) (string, bool, error) {
	switch {
	case want.DisablePassword:
		return "PASSWORD NULL", have != nil && have.Verifier != "", nil
	case want.Password == nil || *want.Password == "":
		return "", false, nil
	case have != nil && ScramMatches(have.Verifier, *want.Password):
		return "", false, nil
	}
	v, err := verifier(*want.Password)
	if err != nil {
		return "", false, err
	}
	return "PASSWORD " + quoteLiteral(v), true, nil
}

// membershipChanges grants the declared memberships the role lacks and revokes the others, each
// grant of them (by grantor, from 16).
func membershipChanges(want agentapi.ManagedRole, have *existingRole, rules roleRules) []string {
	name := pgx.Identifier{want.Name}.Sanitize()
	var statements []string
	for _, group := range want.InRoles {
		if have == nil || have.MemberOf[group] == nil {
			statements = append(statements, "GRANT "+pgx.Identifier{group}.Sanitize()+" TO "+name)
		}
	}
	if have == nil {
		return statements
	}
	for _, group := range sortedKeys(have.MemberOf) {
		if slices.Contains(want.InRoles, group) {
			continue
		}
		revoke := "REVOKE " + pgx.Identifier{group}.Sanitize() + " FROM " + name
		if !rules.ByGrantor {
			statements = append(statements, revoke)
			continue
		}
		for _, grantor := range have.MemberOf[group] {
			statements = append(statements, revoke+" GRANTED BY "+pgx.Identifier{grantor}.Sanitize())
		}
	}
	return statements
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
