// Command kubectl-pgpilot is pgpilot's kubectl plugin: with it on PATH, `kubectl pgpilot
// status NAME` shows a PostgresCluster at a glance, and promote, restart, backup, psql, logs and
// report operate it (internal/plugin).
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/pgpilot/pgpilot-operator/internal/plugin"
)

func main() {
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
