package agent_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// agentBinary is a copy of this test binary that PostgreSQL's user may run: as
// `agentBinary pgbackrest ...` it is the pod's `agent pgbackrest ...`.
var agentBinary string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "pgbackrest" {
		err := agent.PgBackRestCommand(os.Args[2:]) // returns only when it could not exec pgBackRest
		fmt.Fprintln(os.Stderr, "agent pgbackrest:", err)
		os.Exit(1)
	}
	dir, err := copySelf()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func copySelf() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "pgpilot-agent-bin-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, err
	}
	in, err := os.Open(self)
	if err != nil {
		return dir, err
	}
	defer func() { _ = in.Close() }()
	agentBinary = filepath.Join(dir, "agent")
	out, err := os.OpenFile(agentBinary, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return dir, err
	}
	if _, err := io.Copy(out, in); err != nil {
		return dir, err
	}
	return dir, out.Close()
}
