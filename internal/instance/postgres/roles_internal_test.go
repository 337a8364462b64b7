package postgres

import "testing"

// A standby's primary_conninfo is rewritten when it would authenticate or encrypt otherwise than
// desired: an earlier release's (no client certificate) is, even with the same sslmode.
func TestConnInfoDiffers(t *testing.T) {
	desired := func(mode, password string) string {
		return ConnInfo("host", "db-rw", "user", "streaming_replica", "password", password, "sslmode", mode,
			"sslrootcert", "/run/tls/server-ca.crt", "sslcert", "/run/tls/replication.crt", "sslkey", "/run/tls/replication.key")
	}
	// What pg_basebackup -R writes for a clone by an agent without certificates.
	basebackup := "user=streaming_replica password=pw channel_binding=prefer host=db-rw port=5432 sslmode=prefer sslcompression=0 sslsni=1 target_session_attrs=any"
	for _, tc := range []struct {
		name              string
		current, want, pw string
		differs           bool
	}{
		{"the same", desired("prefer", `it's`), desired("prefer", `it's`), `it's`, false},
		{"sslmode", desired("prefer", "pw"), desired("verify-full", "pw"), "pw", true},
		{"password", desired("prefer", "old"), desired("prefer", "new"), "new", true},
		{"no client certificate yet (an earlier release's clone)", basebackup, desired("prefer", "pw"), "pw", true},
		{"quotes and backslashes", ConnInfo("sslcert", `/a\b'c`), ConnInfo("sslcert", `/a\b'c`), "", false},
	} {
		if got := connInfoDiffers(tc.current, tc.want, tc.pw); got != tc.differs {
			t.Errorf("%s: differs %t, want %t", tc.name, got, tc.differs)
		}
	}
}
