package postgres

import (
	"reflect"
	"slices"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// Reading a managed database's schemas and extensions takes a connection to it: about 1 ms of the
// agent's CPU, and a backend's start on the server, per database and pass. The server's
// statistics count every row inserted, updated or deleted in a database, its own catalogs'
// included, and every change to a schema or an extension writes one. So a database with the
// same count as when its items were last read as declared cannot have drifted since, and that
// read's results stand without a connection.
//
// The count moves on a session's commit only once the session sends its statistics: when it goes
// idle (within about a second, or 10 s after its previous report) or ends, in the worst case a
// minute later under contention. A pass in between sees the change on the next one. Whatever
// makes the count unreliable reads every database: track_counts off, a reset of the database's
// statistics, a restart (crash recovery discards them), another database of the same name.

// QuietDatabases remembers, by name, the managed databases whose schemas and extensions a pass
// read as declared, with their write count then. The caller keeps it from pass to pass; a nil
// one reads every database.
type QuietDatabases map[string]quietDatabase

type quietDatabase struct {
	writes              databaseWrites
	declared            agentapi.ManagedDatabase
	schemas, extensions []agentapi.ItemResult
}

// databaseWrites is what the statistics say of the rows written in a database; the zero value
// says nothing (track_counts is off).
type databaseWrites struct {
	oid        uint32
	rows       int64
	statsReset string
	started    string
}

func (w databaseWrites) counted() bool { return w != databaseWrites{} }

// reuse puts the last read's results in result when the database's declaration and write count
// are those of that read, and says whether it did.
func (q QuietDatabases) reuse(want agentapi.ManagedDatabase, existing *existingDatabase, result *agentapi.DatabaseResult) bool {
	last, ok := q[want.Name]
	if !ok || existing == nil || !existing.writes.counted() || existing.writes != last.writes ||
		!reflect.DeepEqual(last.declared, want) {
		return false
	}
	result.Schemas, result.Extensions = slices.Clone(last.schemas), slices.Clone(last.extensions)
	return true
}

// note remembers the database when its items were read and found as declared, without a
// statement run or an error in the pass, and forgets it otherwise.
func (q QuietDatabases) note(want agentapi.ManagedDatabase, existing *existingDatabase, result agentapi.DatabaseResult, statements int) {
	if q == nil {
		return
	}
	if existing == nil || !existing.writes.counted() || statements > 0 ||
		result.State != agentapi.RoleApplied || len(result.Changed) > 0 {
		delete(q, want.Name)
		return
	}
	q[want.Name] = quietDatabase{writes: existing.writes, declared: want,
		schemas: slices.Clone(result.Schemas), extensions: slices.Clone(result.Extensions)}
}

// forget drops the databases no longer declared.
func (q QuietDatabases) forget(declared []agentapi.ManagedDatabase) {
	for name := range q {
		if !slices.ContainsFunc(declared, func(d agentapi.ManagedDatabase) bool { return d.Name == name }) {
			delete(q, name)
		}
	}
}
