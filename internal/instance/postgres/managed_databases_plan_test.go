package postgres

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

func TestPlanDatabaseDiffsDeclaredAgainstExisting(t *testing.T) {
	roles := map[string]bool{"app": true, "reports": true}
	shop := agentapi.ManagedDatabase{Name: "shop", Owner: "app", ConnectionLimit: -1}
	with := func(change func(*agentapi.ManagedDatabase)) agentapi.ManagedDatabase {
		d := shop
		change(&d)
		return d
	}
	asIs := func() *existingDatabase {
		return &existingDatabase{Owner: "app", Encoding: "UTF8", Collate: "C.UTF-8", Ctype: "C.UTF-8", ConnectionLimit: -1, Made: true}
	}
	notMade := func(owner string) *existingDatabase {
		db := asIs()
		db.Made, db.Owner = false, owner
		return db
	}
	unrecorded := func() *existingDatabase {
		db := asIs()
		db.Unrecorded = true
		return db
	}
	for _, c := range []struct {
		name             string
		want             agentapi.ManagedDatabase
		have             *existingDatabase
		create, drop     string
		alter, changed   []string
		refused, problem string
		absent, kept     bool
		record           bool
	}{
		{name: "new database: the server's encoding and locale", want: shop,
			create: `CREATE DATABASE "shop" OWNER "app" CONNECTION LIMIT -1`, changed: []string{"created"}},
		{name: "new database with its own encoding and locale: from template0", want: with(func(d *agentapi.ManagedDatabase) {
			d.Encoding, d.Locale, d.ConnectionLimit = "UTF8", "C.UTF-8", 20
		}), create: `CREATE DATABASE "shop" OWNER "app" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' CONNECTION LIMIT 20`, changed: []string{"created"}},
		{name: "as declared: nothing", want: shop, have: asIs()},
		{name: "spellings of one encoding and locale are the same", want: with(func(d *agentapi.ManagedDatabase) { d.Encoding, d.Locale = "utf-8", "C.utf8" }), have: asIs()},
		{name: "owner and connection limit changed", want: with(func(d *agentapi.ManagedDatabase) { d.Owner, d.ConnectionLimit = "reports", 5 }), have: asIs(),
			alter: []string{`ALTER DATABASE "shop" OWNER TO "reports"`, `ALTER DATABASE "shop" CONNECTION LIMIT 5`}, changed: []string{"owner", "connection limit"}},
		{name: "another encoding cannot be had: reported, the rest applied", want: with(func(d *agentapi.ManagedDatabase) { d.Encoding, d.ConnectionLimit = "LATIN1", 5 }), have: asIs(),
			alter: []string{`ALTER DATABASE "shop" CONNECTION LIMIT 5`}, changed: []string{"connection limit"}, problem: "the database has encoding UTF8, not LATIN1"},
		{name: "another locale cannot be had", want: with(func(d *agentapi.ManagedDatabase) { d.Locale = "en_US.UTF-8" }), have: asIs(),
			problem: "the database has locale C.UTF-8"},
		{name: "an owner that does not exist: nothing run", want: with(func(d *agentapi.ManagedDatabase) { d.Owner = "nobody" }), refused: "owner nobody does not exist"},
		{name: "pgpilot's databases are refused", want: with(func(d *agentapi.ManagedDatabase) { d.Name = "app" }), have: asIs(), refused: "database app is pgpilot's own"},
		{name: "template1 is refused", want: with(func(d *agentapi.ManagedDatabase) { d.Name = "template1" }), refused: "pgpilot's own"},
		{name: "absent and there: dropped, never forced", want: with(func(d *agentapi.ManagedDatabase) { d.Absent = true }), have: asIs(),
			drop: `DROP DATABASE "shop"`, changed: []string{"dropped"}},
		{name: "absent and gone", want: with(func(d *agentapi.ManagedDatabase) { d.Absent = true }), absent: true},
		{name: "absent with an owner gone: still dropped", want: with(func(d *agentapi.ManagedDatabase) { d.Absent, d.Owner = true, "gone" }), have: asIs(),
			drop: `DROP DATABASE "shop"`, changed: []string{"dropped"}},
		{name: "not made by pgpilot, its owner as declared: adopted", want: with(func(d *agentapi.ManagedDatabase) { d.ConnectionLimit = 5 }), have: notMade("app"),
			alter: []string{`ALTER DATABASE "shop" CONNECTION LIMIT 5`}, changed: []string{"connection limit"}},
		{name: "not made by pgpilot, another owner: never taken from it", want: shop, have: notMade("payments"),
			refused: "owned by payments, and pgpilot did not make it"},
		{name: "not made by pgpilot and asked absent: kept", want: with(func(d *agentapi.ManagedDatabase) { d.Absent = true }), have: notMade("app"), kept: true},
		{name: "made by an agent stopped before recording it: recorded", want: shop, have: unrecorded(), record: true},
		{name: "made, not recorded, and changed since: recorded and put back", want: with(func(d *agentapi.ManagedDatabase) { d.ConnectionLimit = 5 }), have: unrecorded(),
			alter: []string{`ALTER DATABASE "shop" CONNECTION LIMIT 5`}, changed: []string{"connection limit"}, record: true},
		{name: "made, not recorded, and asked absent: dropped", want: with(func(d *agentapi.ManagedDatabase) { d.Absent = true }), have: unrecorded(),
			drop: `DROP DATABASE "shop"`, changed: []string{"dropped"}},
		{name: "names are quoted", want: with(func(d *agentapi.ManagedDatabase) { d.Name, d.Owner = `we"ird`, "app" }),
			create: `CREATE DATABASE "we""ird" OWNER "app" CONNECTION LIMIT -1`, changed: []string{"created"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planDatabase(c.want, c.have, roles, []string{"app"})
			if plan.create != c.create || plan.drop != c.drop || !slices.Equal(plan.alter, c.alter) || !slices.Equal(plan.changed, c.changed) || plan.absent != c.absent || plan.kept != c.kept || plan.record != c.record {
				t.Errorf("got create %q drop %q alter %q changed %q absent %v kept %v record %v", plan.create, plan.drop, plan.alter, plan.changed, plan.absent, plan.kept, plan.record)
			}
			if !matches(plan.refused, c.refused) || !matches(plan.problem, c.problem) {
				t.Errorf("refused %q (want %q), problem %q (want %q)", plan.refused, c.refused, plan.problem, c.problem)
			}
		})
	}
}

// matches: both empty, or got holds want.
func matches(got, want string) bool {
	return (got == "") == (want == "") && strings.Contains(got, want)
}

func TestPlanSchemaDiffsDeclaredAgainstExisting(t *testing.T) {
	roles := map[string]bool{"app": true, "etl": true}
	owner := func(name string) *string { return &name }
	for _, c := range []struct {
		name       string
		want       agentapi.ManagedSchema
		have       *string
		statements []string
		refused    string
		absent     bool
	}{
		{name: "new schema", want: agentapi.ManagedSchema{Name: "sales", Owner: "app"}, statements: []string{`CREATE SCHEMA "sales" AUTHORIZATION "app"`}},
		{name: "as declared", want: agentapi.ManagedSchema{Name: "sales", Owner: "app"}, have: owner("app")},
		{name: "owner changed by hand", want: agentapi.ManagedSchema{Name: "sales", Owner: "app"}, have: owner("etl"), statements: []string{`ALTER SCHEMA "sales" OWNER TO "app"`}},
		{name: "owner missing", want: agentapi.ManagedSchema{Name: "sales", Owner: "nobody"}, refused: "owner nobody does not exist"},
		{name: "absent: dropped only when empty", want: agentapi.ManagedSchema{Name: "sales", Owner: "app", Absent: true}, have: owner("app"), statements: []string{`DROP SCHEMA "sales" RESTRICT`}},
		{name: "absent and gone", want: agentapi.ManagedSchema{Name: "sales", Owner: "app", Absent: true}, absent: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planSchema(c.want, c.have, roles)
			if !slices.Equal(plan.statements, c.statements) || !matches(plan.refused, c.refused) || plan.absent != c.absent || plan.role != "" {
				t.Errorf("got %+v", plan)
			}
		})
	}
}

func TestPlanExtensionCreatesTrustedOnesAsTheOwnerAndReportsWhatTheImageLacks(t *testing.T) {
	shipped := map[string]*availableExtension{
		"hstore":             {DefaultVersion: "1.8", Trusted: map[string]bool{"1.7": true, "1.8": true}},
		"pg_stat_statements": {DefaultVersion: "1.10", Trusted: map[string]bool{"1.10": false}},
	}
	for _, c := range []struct {
		name       string
		want       agentapi.ManagedExtension
		have       *existingExtension
		statements []string
		superuser  []string
		role       string
		refused    string
		absent     bool
	}{
		{name: "new: the default version, as the owner", want: agentapi.ManagedExtension{Name: "hstore"},
			statements: []string{`CREATE EXTENSION "hstore"`}, role: "app"},
		{name: "new in a schema and version", want: agentapi.ManagedExtension{Name: "hstore", Version: "1.7", Schema: "ext"},
			statements: []string{`CREATE EXTENSION "hstore" SCHEMA "ext" VERSION '1.7'`}, role: "app"},
		{name: "installed, no version asked: kept as it is", want: agentapi.ManagedExtension{Name: "hstore"}, have: &existingExtension{Version: "1.7", Schema: "public"}},
		{name: "a version asked: updated", want: agentapi.ManagedExtension{Name: "hstore", Version: "1.8"}, have: &existingExtension{Version: "1.7", Schema: "public"},
			statements: []string{`ALTER EXTENSION "hstore" UPDATE TO '1.8'`}, role: "app"},
		{name: "moved by hand: put back", want: agentapi.ManagedExtension{Name: "hstore", Schema: "ext"}, have: &existingExtension{Version: "1.8", Schema: "public"},
			superuser: []string{`ALTER EXTENSION "hstore" SET SCHEMA "ext"`}},
		{name: "not shipped: reported, nothing run", want: agentapi.ManagedExtension{Name: "postgis"}, refused: "the image does not ship extension postgis"},
		{name: "updated as the owner, then moved as the superuser", want: agentapi.ManagedExtension{Name: "hstore", Version: "1.8", Schema: "ext"}, have: &existingExtension{Version: "1.7", Schema: "public"},
			statements: []string{`ALTER EXTENSION "hstore" UPDATE TO '1.8'`}, role: "app", superuser: []string{`ALTER EXTENSION "hstore" SET SCHEMA "ext"`}},
		{name: "a version not shipped", want: agentapi.ManagedExtension{Name: "hstore", Version: "9.9"}, refused: "it has 1.7, 1.8"},
		{name: "an update to a version not shipped", want: agentapi.ManagedExtension{Name: "hstore", Version: "9.9"}, have: &existingExtension{Version: "1.7", Schema: "public"}, refused: "it has 1.7, 1.8"},
		{name: "untrusted: refused", want: agentapi.ManagedExtension{Name: "pg_stat_statements"}, refused: "is not trusted"},
		{name: "installed as asked: nothing to do, whatever the image ships", want: agentapi.ManagedExtension{Name: "postgis", Version: "3.5"}, have: &existingExtension{Version: "3.5", Schema: "public"}},
		{name: "installed, moved by hand, the image's versions not read: put back", want: agentapi.ManagedExtension{Name: "postgis", Schema: "gis"}, have: &existingExtension{Version: "3.5", Schema: "public"},
			superuser: []string{`ALTER EXTENSION "postgis" SET SCHEMA "gis"`}},
		{name: "untrusted but already there by hand: nothing to do", want: agentapi.ManagedExtension{Name: "pg_stat_statements"}, have: &existingExtension{Version: "1.10", Schema: "public"}},
		{name: "absent: dropped as the owner, never CASCADE", want: agentapi.ManagedExtension{Name: "hstore", Absent: true}, have: &existingExtension{Version: "1.8"},
			statements: []string{`DROP EXTENSION "hstore"`}, role: "app"},
		{name: "absent and gone", want: agentapi.ManagedExtension{Name: "postgis", Absent: true}, absent: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planExtension(c.want, c.have, shipped[c.want.Name], "app")
			if !slices.Equal(plan.statements, c.statements) || !slices.Equal(plan.superuser, c.superuser) || plan.role != c.role || !matches(plan.refused, c.refused) || plan.absent != c.absent {
				t.Errorf("got %+v", plan)
			}
		})
	}
}
