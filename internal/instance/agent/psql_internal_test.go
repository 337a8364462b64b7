package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// The application user's password reaches psql through its environment, never its arguments:
// those travel in the exec request and show in the API server's audit log.
func TestPsqlInvocationKeepsThePasswordOutOfTheArguments(t *testing.T) {
	dir := t.TempDir()
	for name, value := range map[string]string{"superuser-password": "su", "replication-password": "rp",
		"app-username": "shop", "app-password": "s3cret-app", "agent-token": "tok"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := agentapi.Config{CredentialsDir: dir, SocketDir: "/var/run/postgresql", PostgresPort: 5432, AppDatabase: "orders"}
	args, env, err := psqlInvocation(c, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--host=127.0.0.1", "--port=5432", "--username=shop", "--dbname=orders"}
	if !slices.Equal(args, want) || !slices.Equal(env, []string{"PGPASSWORD=s3cret-app"}) {
		t.Errorf("app: args %v env %v, want %v and the password in PGPASSWORD", args, env, want)
	}
	args, env, err = psqlInvocation(c, true)
	if err != nil || len(env) != 0 || !slices.Contains(args, "--host=/var/run/postgresql") || !slices.Contains(args, "--username=postgres") {
		t.Errorf("superuser: args %v env %v (%v), want the socket and no password", args, env, err)
	}
	if strings.Contains(strings.Join(args, " "), "s3cret") {
		t.Error("a password in psql's arguments")
	}
}
