package postgres

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// What a pass reports it changed when it made or dropped an item.
const (
	changedCreated = "created"
	changedDropped = "dropped"
)

// existingDatabase is a database as pg_database has it. Made: pgpilot made it (its record of
// the databases it made, pgpilot.databases, holds its OID); Unrecorded: made by an agent stopped
// before it recorded it (managed_databases_made.go).
type existingDatabase struct {
	Owner, Encoding, Collate, Ctype string
	ConnectionLimit                 int32
	Made, Unrecorded                bool
	writes                          databaseWrites
}

// databasePlan is what brings a database to its declaration. Create runs alone (CREATE DATABASE
// takes no transaction); alter runs in one transaction.
type databasePlan struct {
	create, drop string
	alter        []string
	changed      []string
	// refused says why nothing is run for the database; problem why it is in error although the
	// rest of its declaration was applied (an encoding the server cannot change).
	refused, problem string
	// absent: declared absent, and not there; kept: declared absent, and there, but not made by
	// pgpilot, which never drops such a database; record: made by pgpilot, not yet recorded.
	absent, kept, record bool
}

// runsStatements says whether applying the plan takes a connection to the postgres database.
func (p databasePlan) runsStatements() bool {
	return p.refused == "" && !p.absent && !p.kept && (p.create != "" || p.drop != "" || len(p.alter) > 0 || p.record)
}

// planDatabase is what brings have (nil when the database does not exist) to want. roles holds
// which of the roles the declaration names exist.
func planDatabase(want agentapi.ManagedDatabase, have *existingDatabase, roles map[string]bool, forbidden []string) databasePlan {
	name := pgx.Identifier{want.Name}.Sanitize()
	switch {
	case slices.Contains(forbidden, want.Name) || slices.Contains([]string{"postgres", "template0", "template1"}, want.Name):
		return databasePlan{refused: fmt.Sprintf("database %s is pgpilot's own: a Database cannot manage it", want.Name)}
	case want.Absent && have == nil:
		return databasePlan{absent: true}
	case want.Absent && !have.Made:
		return databasePlan{kept: true}
	case want.Absent:
		return databasePlan{drop: "DROP DATABASE " + name, changed: []string{changedDropped}}
	case !roles[want.Owner]:
		return databasePlan{refused: fmt.Sprintf("owner %s does not exist", want.Owner)}
	case have != nil && !have.Made && have.Owner != want.Owner:
		// Taking a database from its owner would hand its data to whoever may write a Database.
		return databasePlan{refused: fmt.Sprintf("database %s exists, owned by %s, and pgpilot did not make it: it does not take a database from its owner (ALTER DATABASE … OWNER TO %s by hand adopts it)",
			want.Name, have.Owner, want.Owner)}
	}
	owner := pgx.Identifier{want.Owner}.Sanitize()
	if have == nil {
		statement := "CREATE DATABASE " + name + " OWNER " + owner
		if want.Encoding != "" || want.Locale != "" {
			statement += " TEMPLATE template0" // template1's encoding and locale are the server's
		}
		if want.Encoding != "" {
			statement += " ENCODING " + quoteLiteral(want.Encoding)
		}
		if want.Locale != "" {
			statement += " LOCALE " + quoteLiteral(want.Locale)
		}
		statement += fmt.Sprintf(" CONNECTION LIMIT %d", want.ConnectionLimit)
		return databasePlan{create: statement, changed: []string{changedCreated}}
	}
	plan := databasePlan{record: have.Unrecorded}
	if have.Owner != want.Owner {
		plan.alter = append(plan.alter, "ALTER DATABASE "+name+" OWNER TO "+owner)
		plan.changed = append(plan.changed, "owner")
	}
	if have.ConnectionLimit != want.ConnectionLimit {
		plan.alter = append(plan.alter, fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT %d", name, want.ConnectionLimit))
		plan.changed = append(plan.changed, "connection limit")
	}
	switch {
	case want.Encoding != "" && !sameCharsetName(want.Encoding, have.Encoding):
		plan.problem = fmt.Sprintf("the database has encoding %s, not %s: an encoding is set when a database is made", have.Encoding, want.Encoding)
	case want.Locale != "" && (!sameCharsetName(want.Locale, have.Collate) || !sameCharsetName(want.Locale, have.Ctype)):
		plan.problem = fmt.Sprintf("the database has locale %s (ctype %s), not %s: a locale is set when a database is made", have.Collate, have.Ctype, want.Locale)
	}
	return plan
}

// sameCharsetName compares encoding and locale names as the server and the C library read them:
// UTF8, utf-8 and UTF_8 are one encoding, C.UTF-8 and C.utf8 one locale.
func sameCharsetName(a, b string) bool {
	norm := strings.NewReplacer("-", "", "_", "")
	return strings.EqualFold(norm.Replace(a), norm.Replace(b))
}

// existingExtension is an installed extension.
type existingExtension struct{ Version, Schema string }

// availableExtension is what the image ships of an extension: its versions and which of them
// PostgreSQL lets a database owner create (trusted).
type availableExtension struct {
	DefaultVersion string
	Trusted        map[string]bool
}

// itemPlan is what brings a schema or an extension to its declaration: statements run in one
// transaction, as role when it is set, then superuser's as the superuser.
type itemPlan struct {
	statements, superuser []string
	role                  string
	changed               []string
	refused               string
	absent                bool
}

// planSchema is what brings have (nil when the schema does not exist; else its owner) to want.
func planSchema(want agentapi.ManagedSchema, have *string, roles map[string]bool) itemPlan {
	name := pgx.Identifier{want.Name}.Sanitize()
	switch {
	case want.Absent && have == nil:
		return itemPlan{absent: true}
	case want.Absent:
		// RESTRICT: a schema that holds objects is refused by the server, never emptied.
		return itemPlan{statements: []string{"DROP SCHEMA " + name + " RESTRICT"}, changed: []string{changedDropped}}
	case !roles[want.Owner]:
		return itemPlan{refused: fmt.Sprintf("owner %s does not exist", want.Owner)}
	case have == nil:
		return itemPlan{statements: []string{"CREATE SCHEMA " + name + " AUTHORIZATION " + pgx.Identifier{want.Owner}.Sanitize()}, changed: []string{changedCreated}}
	case *have != want.Owner:
		return itemPlan{statements: []string{"ALTER SCHEMA " + name + " OWNER TO " + pgx.Identifier{want.Owner}.Sanitize()}, changed: []string{"owner"}}
	}
	return itemPlan{}
}

// planExtension is what brings have (nil when not installed) to want, run as owner, the
// database's owner: only extensions PostgreSQL marks trusted, whose objects the owner then owns.
// One the image does not ship, or not in that version, is refused before any statement: it is
// reported, not retried against the server on every pass.
func planExtension(want agentapi.ManagedExtension, have *existingExtension, available *availableExtension, owner string) itemPlan {
	name := pgx.Identifier{want.Name}.Sanitize()
	if want.Absent {
		if have == nil {
			return itemPlan{absent: true}
		}
		// No CASCADE: the server refuses while objects depend on it.
		return itemPlan{statements: []string{"DROP EXTENSION " + name}, role: owner, changed: []string{changedDropped}}
	}
	if installedAsAsked(want, have) {
		return moveExtension(want, have)
	}
	if available == nil {
		return itemPlan{refused: fmt.Sprintf("the image does not ship extension %s", want.Name)}
	}
	version := want.Version
	if version == "" {
		version = available.DefaultVersion
	}
	trusted, shipped := available.Trusted[version]
	switch {
	case !shipped:
		return itemPlan{refused: fmt.Sprintf("the image does not ship extension %s in version %s (it has %s)", want.Name, version, strings.Join(sortedKeys(available.Trusted), ", "))}
	case !trusted:
		return itemPlan{refused: fmt.Sprintf("extension %s %s is not trusted: pgpilot creates and updates only trusted extensions, as the database's owner", want.Name, version)}
	}
	if have == nil {
		statement := "CREATE EXTENSION " + name
		if want.Schema != "" {
			statement += " SCHEMA " + pgx.Identifier{want.Schema}.Sanitize()
		}
		if want.Version != "" {
			statement += " VERSION " + quoteLiteral(want.Version)
		}
		return itemPlan{statements: []string{statement}, role: owner, changed: []string{changedCreated}}
	}
	plan := moveExtension(want, have)
	plan.statements = append(plan.statements, "ALTER EXTENSION "+name+" UPDATE TO "+quoteLiteral(version))
	plan.changed = append([]string{"version " + have.Version + " to " + version}, plan.changed...)
	plan.role = owner
	return plan
}

// installedAsAsked: the extension is installed in the version declared, or in any when none
// is: nothing depends on what the image ships, which is then not read.
func installedAsAsked(want agentapi.ManagedExtension, have *existingExtension) bool {
	return !want.Absent && have != nil && (want.Version == "" || want.Version == have.Version)
}

// moveExtension puts an installed extension back in its declared schema, as the superuser: the
// owner of a trusted extension does not own its member objects, which move with it; moving runs
// no script.
func moveExtension(want agentapi.ManagedExtension, have *existingExtension) itemPlan {
	if want.Schema == "" || have.Schema == want.Schema {
		return itemPlan{}
	}
	return itemPlan{superuser: []string{"ALTER EXTENSION " + pgx.Identifier{want.Name}.Sanitize() + " SET SCHEMA " + pgx.Identifier{want.Schema}.Sanitize()},
		changed: []string{"schema"}}
}
