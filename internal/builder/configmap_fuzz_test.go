package builder

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The test's own idea of a parameter pgpilot can write, independent of the builder's: a
// PostgreSQL setting name, not a file directive, not a setting pgpilot manages or forbids (in any
// case: PostgreSQL compares names case-insensitively), shared_preload_libraries only with the
// images' libraries, and a value without NUL, which no quoting can carry because PostgreSQL keeps
// values as C strings.
var testSettingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func writable(name, value string) bool {
	lower := strings.ToLower(name)
	return testSettingName.MatchString(name) &&
		!slices.Contains([]string{"include", "include_dir", "include_if_exists"}, lower) &&
		!slices.Contains(pgv1.ManagedParameters, lower) &&
		!slices.Contains(pgv1.ForbiddenParameters, lower) &&
		(lower != "shared_preload_libraries" || onlyImageLibraries(value)) &&
		!strings.ContainsRune(value, 0)
}

func onlyImageLibraries(value string) bool {
	for _, library := range strings.Split(value, ",") {
		if !slices.Contains([]string{"pg_stat_statements", "auto_explain", "pgaudit"}, strings.TrimSpace(library)) {
			return false
		}
	}
	return true
}

// checkPostgresqlConf asserts what PostgreSQL reads from conf: every line parses, no setting
// appears twice, pgpilot's managed settings have pgpilot's values, and every writable user
// parameter is exactly one setting with exactly the user's value. Anything else PostgreSQL
// sees is a setting the user injected.
func checkPostgresqlConf(t *testing.T, c *pgv1.PostgresCluster, conf string) {
	t.Helper()
	settings, err := parseGUCFile(conf)
	if err != nil {
		t.Fatalf("PostgreSQL would refuse postgresql.conf: %v\n%s", err, conf)
	}
	seen := map[string]gucSetting{}
	for _, s := range settings {
		name := strings.ToLower(s.name)
		if prev, dup := seen[name]; dup {
			t.Errorf("%s is set on lines %d and %d: the later one wins\n%s", name, prev.line, s.line, conf)
		}
		seen[name] = s
	}
	want := map[string][]string{}
	for _, kv := range managedParameters(c) {
		managed, err := parseGUCFile(kv[0] + " = " + kv[1])
		if err != nil {
			t.Fatalf("managed setting %s: %v", kv[0], err)
		}
		want[kv[0]] = []string{managed[0].value}
	}
	for name, value := range defaultParameters {
		want[name] = []string{value}
	}
	overridden := map[string]bool{}
	for name, value := range c.Spec.PostgreSQL.Parameters {
		if !writable(name, string(value)) {
			continue
		}
		lower := strings.ToLower(name)
		if !overridden[lower] {
			overridden[lower], want[lower] = true, nil
		}
		// Two spellings of one name are one setting; either value is the user's.
		want[lower] = append(want[lower], string(value))
	}
	for name, values := range want {
		got, ok := seen[name]
		if !ok {
			t.Errorf("%s is missing\n%s", name, conf)
			continue
		}
		if !slices.Contains(values, got.value) {
			t.Errorf("%s = %q, want one of %q\n%s", name, got.value, values, conf)
		}
	}
	for name := range seen {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is set, but nobody asked for it\n%s", name, conf)
		}
	}
}

// checkPgHBAConf asserts that every user entry is exactly one pg_hba.conf record and that
// pgpilot's own records, those of the file without user entries, surround them unchanged.
// required is the TLS policy of a cluster whose instances all have certificates.
var required = agentapi.TLSPolicy{Required: true}

func checkPgHBAConf(t *testing.T, c *pgv1.PostgresCluster, conf string) {
	t.Helper()
	if strings.ContainsRune(conf, 0) {
		t.Errorf("pg_hba.conf has a NUL, which ends the record PostgreSQL reads\n%q", conf)
	}
	bare := c.DeepCopy()
	bare.Spec.PostgreSQL.PgHBA = nil
	pgpilot, records, entries := hbaRecords(PgHBAConf(bare, required)), hbaRecords(conf), len(c.Spec.PostgreSQL.PgHBA)
	if len(records) != len(pgpilot)+entries {
		t.Fatalf("%d records, want %d: pgpilot's %d and one per user entry\n%q", len(records), len(pgpilot)+entries, len(pgpilot), conf)
	}
	for i := range len(pgpilot) + 1 {
		if slices.Equal(records[:i], pgpilot[:i]) && slices.Equal(records[i+entries:], pgpilot[i:]) {
			return
		}
	}
	t.Errorf("pgpilot's records %q are not all there, unchanged, around the user's\n%q", pgpilot, conf)
}

// hostileValues are the seeds of both fuzz targets and the cases of the table tests.
var hostileValues = []string{
	"",
	`'`,
	`''`,
	`\`,
	`a\`,
	`\'`,
	`\\'`,
	`it's`,
	"\\'\nwal_level = minimal\n#",
	"1\nwal_level = minimal",
	"on # comment",
	"a = b",
	"x\x00wal_level = minimal",
	"\r\nssl = off",
	"caf\u00e9 \u65e5\u672c",
	"\\n\\t\\101",
	strings.Repeat(`\'`, 5000),
}

func FuzzPostgresqlConf(f *testing.F) {
	names := []string{"search_path", "a = 1\nb", "WAL_LEVEL", "Max_Wal_Senders", "include", "pg_stat_statements.max", "x#y", ""}
	for i, v := range hostileValues {
		f.Add(names[i%len(names)], v, "max_wal_senders", v)
	}
	f.Fuzz(func(t *testing.T, name1, value1, name2, value2 string) {
		c := newCluster(func(c *pgv1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{name1: pgv1.ParameterValue(value1), name2: pgv1.ParameterValue(value2)}
		})
		checkPostgresqlConf(t, c, PostgresqlConf(c))
	})
}

func FuzzPgHBAConf(f *testing.F) {
	for _, v := range hostileValues {
		f.Add("host all all 10.0.0.0/8 "+v, v)
	}
	f.Fuzz(func(t *testing.T, entry1, entry2 string) {
		c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.PgHBA = []string{entry1, entry2} })
		checkPgHBAConf(t, c, PgHBAConf(c, required))
	})
}

func TestPostgresqlConfHostileParameters(t *testing.T) {
	tests := []struct {
		name       string
		parameters map[string]pgv1.ParameterValue
	}{
		{name: "value ending in a backslash", parameters: map[string]pgv1.ParameterValue{"search_path": `public\`}},
		{name: "backslash before a quote", parameters: map[string]pgv1.ParameterValue{"search_path": `\'`}},
		{name: "newline after an escaped quote", parameters: map[string]pgv1.ParameterValue{"search_path": "\\'\nwal_level = minimal\n#"}},
		{name: "newline in a value", parameters: map[string]pgv1.ParameterValue{"application_name": "a\nwal_level = minimal"}},
		{name: "carriage return in a value", parameters: map[string]pgv1.ParameterValue{"application_name": "a\rb"}},
		{name: "NUL in a value", parameters: map[string]pgv1.ParameterValue{"application_name": "a\x00b"}},
		{name: "comment and equals in a value", parameters: map[string]pgv1.ParameterValue{"log_line_prefix": "%m # = %p"}},
		{name: "unicode", parameters: map[string]pgv1.ParameterValue{"application_name": "caf\u00e9 \u65e5\u672c"}},
		{name: "huge value", parameters: map[string]pgv1.ParameterValue{"application_name": pgv1.ParameterValue(strings.Repeat(`\'`, 1<<16))}},
		{name: "setting in the name", parameters: map[string]pgv1.ParameterValue{"a = 1\nwal_level": "minimal"}},
		{name: "comment in the name", parameters: map[string]pgv1.ParameterValue{"x#": "1"}},
		{name: "managed setting in upper case", parameters: map[string]pgv1.ParameterValue{"WAL_LEVEL": "minimal"}},
		{name: "default in another case", parameters: map[string]pgv1.ParameterValue{"Max_Wal_Senders": "20"}},
		{name: "one setting in two cases", parameters: map[string]pgv1.ParameterValue{"TimeZone": "UTC", "timezone": "UTC"}},
		{name: "include directive", parameters: map[string]pgv1.ParameterValue{"include_dir": "/tmp"}},
		{name: "a command", parameters: map[string]pgv1.ParameterValue{"archive_cleanup_command": "sh -c 'id > /tmp/x'"}},
		{name: "a command in upper case", parameters: map[string]pgv1.ParameterValue{"RECOVERY_END_COMMAND": "id"}},
		{name: "a library to load", parameters: map[string]pgv1.ParameterValue{"session_preload_libraries": "/tmp/evil"}},
		{name: "an image library and another", parameters: map[string]pgv1.ParameterValue{"shared_preload_libraries": "pgaudit,/tmp/evil"}},
		{name: "image libraries", parameters: map[string]pgv1.ParameterValue{"shared_preload_libraries": "pg_stat_statements, pgaudit"}},
		{name: "extension setting", parameters: map[string]pgv1.ParameterValue{"pg_stat_statements.max": "1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.Parameters = tt.parameters })
			checkPostgresqlConf(t, c, PostgresqlConf(c))
		})
	}
}

func TestPgHBAConfHostileEntries(t *testing.T) {
	for i, entry := range append(hostileValues,
		"host all all 10.0.0.0/8 trust \\",
		"host all all 10.0.0.0/8 reject\nhost all all all trust",
		"host all all all trust\\\r",
	) {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.PostgreSQL.PgHBA = []string{entry} })
			checkPgHBAConf(t, c, PgHBAConf(c, required))
		})
	}
}
