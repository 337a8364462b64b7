package postgres

import "testing"

// A standby's primary_conninfo is rewritten when it would authenticate or encrypt otherwise than
// desired: an earlier release's (no client certificate) is, even with the same sslmode.
func TestConnInfoDiffers(t *testing.T) {
	desired := func(mode string) string {
		return ConnInfo("host", "db-rw", "user", "streaming_replica", "passfile", "/pgdata/pgpilot-replication.pgpass", "sslmode", mode,
			"sslrootcert", "/run/tls/server-ca.crt", "sslcert", "/run/tls/replication.crt", "sslkey", "/run/tls/replication.key")
	}
	// An earlier release's: the password in the connection string itself.
	withPassword := ConnInfo("host", "db-rw", "user", "streaming_replica", "password", "pw", "sslmode", "verify-full",
		"sslrootcert", "/run/tls/server-ca.crt", "sslcert", "/run/tls/replication.crt", "sslkey", "/run/tls/replication.key")
	// What pg_basebackup -R writes for a clone by an agent without certificates.
	basebackup := "user=streaming_replica password=pw channel_binding=prefer host=db-rw port=5432 sslmode=prefer sslcompression=0 sslsni=1 target_session_attrs=any"
	for _, tc := range []struct {
		name          string
		current, want string
		differs       bool
	}{
		{"the same", desired("prefer"), desired("prefer"), false},
		{"sslmode", desired("prefer"), desired("verify-full"), true},
		{"an earlier release's, with the password in it", withPassword, desired("verify-full"), true},
		{"no client certificate yet (an earlier release's clone)", basebackup, desired("prefer"), true},
		{"detached", desired("prefer"), "", true},
		{"still detached", "", "", false},
		{"quotes and backslashes", ConnInfo("sslcert", `/a\b'c`), ConnInfo("sslcert", `/a\b'c`), false},
	} {
		if got := connInfoDiffers(tc.current, tc.want); got != tc.differs {
			t.Errorf("%s: differs %t, want %t", tc.name, got, tc.differs)
		}
	}
}
