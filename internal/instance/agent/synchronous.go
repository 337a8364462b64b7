package agent

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// syncStandbys sets the primary's synchronous_standby_names from the cluster's synchronous
// configuration file (agentapi.SynchronousFile) and the standbys streaming now (the lease
// guard's last look): in preferred mode a standby that stops streaming stops holding commits back
// within a tick.
func (a *Agent) syncStandbys(ctx context.Context, conn *pgx.Conn) {
	config, err := a.synchronousConfig()
	if err != nil {
		a.Log.Error(err, "synchronous replication configuration")
		return
	}
	a.stateMu.Lock()
	streaming := slices.Sorted(maps.Keys(a.peerReplies))
	a.stateMu.Unlock()
	want := config.StandbyNames(a.Config.PodName, streaming)
	changed, err := postgres.EnsureSynchronousStandbyNames(ctx, conn, want)
	if err != nil {
		a.Log.Error(err, "synchronous_standby_names")
	} else if changed {
		a.Log.Info("synchronous_standby_names set", "value", want)
	}
}

// synchronousConfig reads the configuration file; nil when absent (asynchronous).
func (a *Agent) synchronousConfig() (*agentapi.SynchronousConfig, error) {
	data, err := os.ReadFile(filepath.Join(a.Config.ConfigDir, agentapi.SynchronousFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	config := &agentapi.SynchronousConfig{}
	return config, json.Unmarshal(data, config)
}
