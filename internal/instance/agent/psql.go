package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// PsqlCommand is `agent psql [--superuser] ARGS...`: it replaces the process with psql
// connected to this instance, as the application user over loopback (its password from the
// pod's credential files, passed in the environment: never in a command line, the exec request
// or the API server's audit log) or, with --superuser, as the superuser over the socket. It is
// what `kubectl pgpilot psql` runs in the pod.
func PsqlCommand(args []string) error {
	superuser := len(args) > 0 && args[0] == "--superuser"
	if superuser {
		args = args[1:]
	}
	c, err := agentapi.FromEnvironment(os.LookupEnv)
	if err != nil {
		return err
	}
	psql := "psql"
	if c.BinDir != "" {
		psql = filepath.Join(c.BinDir, "psql")
	}
	if psql, err = exec.LookPath(psql); err != nil {
		return fmt.Errorf("psql is not in this PostgreSQL image: %w", err)
	}
	argv, env, err := psqlInvocation(c, superuser)
	if err != nil {
		return err
	}
	return syscall.Exec(psql, append(append([]string{psql}, argv...), args...), append(os.Environ(), env...))
}

// psqlInvocation is psql's connection arguments and environment for the application user or
// the superuser of instance c.
func psqlInvocation(c agentapi.Config, superuser bool) (args, env []string, err error) {
	port := strconv.Itoa(c.PostgresPort)
	if superuser {
		return []string{"--host=" + c.SocketDir, "--port=" + port, "--username=" + agentapi.Superuser, "--dbname=postgres"}, nil, nil
	}
	creds, err := agentapi.ReadCredentials(c.CredentialsDir)
	if err != nil {
		return nil, nil, err
	}
	return []string{"--host=127.0.0.1", "--port=" + port, "--username=" + creds.AppUser, "--dbname=" + c.AppDatabase},
		[]string{"PGPASSWORD=" + creds.AppPassword}, nil
}
