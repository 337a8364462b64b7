package postgres

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

func fixedVerifier(password string) (string, error) { return "SCRAM-SHA-256$v(" + password + ")", nil }

func TestPlanRoleDiffsDeclaredAgainstExisting(t *testing.T) {
	secret := "s3cret"
	matching, err := ScramVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	expiry := time.Date(2027, 6, 1, 12, 0, 0, 0, time.UTC)
	reader := agentapi.ManagedRole{Name: "reader", Login: true, Inherit: true, ConnectionLimit: -1, InRoles: []string{"pg_read_all_data"}}
	asIs := func() *existingRole {
		return &existingRole{Login: true, Inherit: true, ConnectionLimit: -1, Verifier: matching,
			MemberOf: map[string][]string{"pg_read_all_data": {"postgres"}}}
	}
	with := func(change func(*agentapi.ManagedRole)) agentapi.ManagedRole {
		r := reader
		r.InRoles = slices.Clone(reader.InRoles)
		change(&r)
		return r
	}
	changedHave := func(change func(*existingRole)) *existingRole {
		r := asIs()
		change(r)
		return r
	}
	for _, c := range []struct {
		name       string
		want       agentapi.ManagedRole
		have       *existingRole
		rules      roleRules
		statements []string
		changed    []string
		refused    string
	}{
		{name: "new role: every attribute, then its memberships", want: with(func(r *agentapi.ManagedRole) { r.Comment = "reports"; r.Password = &secret }),
			statements: []string{
				`CREATE ROLE "reader" WITH NOSUPERUSER LOGIN INHERIT NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1 VALID UNTIL 'infinity' PASSWORD 'SCRAM-SHA-256$v(s3cret)'`,
				`COMMENT ON ROLE "reader" IS 'reports'`,
				`GRANT "pg_read_all_data" TO "reader"`,
			},
			changed: []string{"created", "member of pg_read_all_data"}},
		{name: "as declared: nothing", want: with(func(r *agentapi.ManagedRole) { r.Password = &secret }), have: asIs()},
		{name: "no Secret: the password is kept", want: reader, have: changedHave(func(r *existingRole) { r.Verifier = "md5abc" })},
		{name: "another password: set", want: with(func(r *agentapi.ManagedRole) { r.Password = ptrTo("rotated") }), have: asIs(),
			statements: []string{`ALTER ROLE "reader" WITH PASSWORD 'SCRAM-SHA-256$v(rotated)'`}, changed: []string{"password"}},
		{name: "password disabled by the spec", want: with(func(r *agentapi.ManagedRole) { r.DisablePassword = true }), have: asIs(),
			statements: []string{`ALTER ROLE "reader" WITH PASSWORD NULL`}, changed: []string{"password"}},
		{name: "made superuser by hand: refused, untouched", want: reader, have: changedHave(func(r *existingRole) { r.Superuser = true }),
			refused: "is a superuser"},
		{name: "replication and expiry changed by hand: put back", want: with(func(r *agentapi.ManagedRole) { r.ValidUntil = &expiry }),
			have:       changedHave(func(r *existingRole) { r.Replication = true; r.ConnectionLimit = 5 }),
			statements: []string{`ALTER ROLE "reader" WITH NOREPLICATION CONNECTION LIMIT -1 VALID UNTIL '2027-06-01T12:00:00Z'`},
			changed:    []string{"replication", "connectionLimit", "validUntil"}},
		{name: "same expiry to the second", want: with(func(r *agentapi.ManagedRole) { r.ValidUntil = &expiry }),
			have: changedHave(func(r *existingRole) { r.ValidUntil = ptrTo(expiry.Add(400 * time.Millisecond)) })},
		{name: "memberships: the declared granted, a hand-made one revoked by each grantor", rules: roleRules{Major: 17, ByGrantor: true},
			want: with(func(r *agentapi.ManagedRole) { r.InRoles = []string{"pg_read_all_data", "reporting"} }),
			have: changedHave(func(r *existingRole) { r.MemberOf["pg_write_all_data"] = []string{"admin", "postgres"} }),
			statements: []string{`GRANT "reporting" TO "reader"`,
				`REVOKE "pg_write_all_data" FROM "reader" GRANTED BY "admin"`, `REVOKE "pg_write_all_data" FROM "reader" GRANTED BY "postgres"`},
			changed: []string{"member of reporting", "not member of pg_write_all_data"}},
		{name: "a revoke before 16 is one statement", rules: roleRules{Major: 15},
			want: reader, have: changedHave(func(r *existingRole) { r.MemberOf["pg_write_all_data"] = []string{"admin"} }),
			statements: []string{`REVOKE "pg_write_all_data" FROM "reader"`}, changed: []string{"not member of pg_write_all_data"}},
		{name: "comment removed", want: reader, have: changedHave(func(r *existingRole) { r.Comment = "old" }),
			statements: []string{`COMMENT ON ROLE "reader" IS NULL`}, changed: []string{"comment"}},
		{name: "absent and existing: dropped", want: with(func(r *agentapi.ManagedRole) { r.Absent = true }), have: asIs(),
			statements: []string{`DROP ROLE "reader"`}, changed: []string{"dropped"}},
		{name: "absent and gone: nothing", want: with(func(r *agentapi.ManagedRole) { r.Absent = true })},
		{name: "reserved name", want: agentapi.ManagedRole{Name: "pg_admin"}, refused: "reserves"},
		{name: "the application owner", want: agentapi.ManagedRole{Name: "app"}, rules: roleRules{Forbidden: []string{"app"}}, refused: "manages"},
		{name: "member of a server-program role", want: with(func(r *agentapi.ManagedRole) { r.InRoles = []string{"pg_execute_server_program"} }),
			refused: "OS user"},
		{name: "member of pgpilot's superuser", want: with(func(r *agentapi.ManagedRole) { r.InRoles = []string{"postgres"} }), refused: "manages"},
		{name: "member of a hand-made superuser", want: with(func(r *agentapi.ManagedRole) { r.InRoles = []string{"boss"} }), refused: "a superuser"},
		{name: "createrole on 15", want: with(func(r *agentapi.ManagedRole) { r.CreateRole = true }), rules: roleRules{Major: 15}, refused: "createrole"},
		{name: "createrole on 17", want: with(func(r *agentapi.ManagedRole) { r.CreateRole = true }), have: asIs(), rules: roleRules{Major: 17},
			statements: []string{`ALTER ROLE "reader" WITH CREATEROLE`}, changed: []string{"createrole"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.rules.Major == 0 {
				c.rules.Major = 17
			}
			existing := map[string]*existingRole{"boss": {Superuser: true}}
			plan := planRole(c.want, c.have, existing, c.rules, fixedVerifier)
			if c.refused != "" || plan.refused != "" {
				if !strings.Contains(plan.refused, c.refused) || c.refused == "" {
					t.Fatalf("refused %q, want %q", plan.refused, c.refused)
				}
				return
			}
			got := slices.Concat(plan.attributes, plan.memberships, nonEmpty(plan.drop))
			if !slices.Equal(got, c.statements) {
				t.Errorf("statements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.statements, "\n"))
			}
			if !slices.Equal(plan.changed, c.changed) {
				t.Errorf("changed %q, want %q", plan.changed, c.changed)
			}
		})
	}
}

func TestScramMatchesOnlyTheVerifiersPassword(t *testing.T) {
	verifier, err := ScramVerifier("caf\u00e9 secret")
	if err != nil {
		t.Fatal(err)
	}
	for password, want := range map[string]bool{"caf\u00e9 secret": true, "cafe secret": false, "": false} {
		if got := ScramMatches(verifier, password); got != want {
			t.Errorf("ScramMatches(%q) = %v, want %v", password, got, want)
		}
	}
	for _, bad := range []string{"", "md5" + strings.Repeat("0", 32), "SCRAM-SHA-256$x:AAAA$a:b", "SCRAM-SHA-256$4096"} {
		if ScramMatches(bad, "") || ScramMatches(bad, "x") {
			t.Errorf("ScramMatches(%q) matched", bad)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
