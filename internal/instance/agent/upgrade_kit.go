package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The upgraded instance keeps a follow kit (postgres.MakeFollowKit) made before its first start
// on the new major; the others join it by linking their own relation files, so the first
// synchronous standby streams on the new major seconds after the upgrade, whatever the
// database's size, with no backup to wait for. The kit is removed a while after the upgrade's
// catch-up (its backup serves a late instance), or by the next upgrade.

// followKitKept is how long the kit outlives the upgrade's catch-up.
const followKitKept = 10 * time.Minute

// followKitFetchTimeout bounds a kit's transfer: a few MiB a database.
const followKitFetchTimeout = 5 * time.Minute

// replayedLSN is where the local standby's replay is.
func (a *Agent) replayedLSN(ctx context.Context) (string, error) {
	conn, err := a.connect(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	var lsn *string
	if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&lsn); err != nil {
		return "", err
	}
	if lsn == nil {
		return "", errors.New("not a standby")
	}
	return *lsn, nil
}

// followKitCheck is what the upgrading instance learns, stopped after its promotion, about
// making a kit: where its timeline began and its shutdown checkpoint, or why no kit can be made.
func (a *Agent) followKitCheck(ctx context.Context, upgrade *postgres.MajorUpgrade) (fromLSN, untilLSN string, err error) {
	if upgrade.Mode != postgres.UpgradeLink {
		return "", "", errors.New("a copy upgrade links nothing the others could keep")
	}
	return upgrade.NoDataChangedSincePromotion(ctx)
}

// makeFollowKit records the kit of the swapped, never started new cluster, or why there is none;
// a failure costs the others a delta restore, not the upgrade.
func (a *Agent) makeFollowKit(ctx context.Context, upgrade *postgres.MajorUpgrade, fromLSN, untilLSN string, checkErr error) {
	err := checkErr
	if err == nil {
		r := a.MajorUpgradeResult()
		var m postgres.FollowKitManifest
		m, err = upgrade.MakeFollowKit(ctx, r.From, r.To, fromLSN, untilLSN)
		copied, linked := m.Copied()
		a.Log.Info("follow kit made", "files", len(m.Files), "copiedBytes", copied, "linkedBytes", linked, "error", err)
	}
	a.upgradeRun.mu.Lock()
	defer a.upgradeRun.mu.Unlock()
	a.upgradeRun.result.FollowKit = err == nil
	if err != nil {
		a.Log.Info("no follow kit: the others are rebuilt from the first backup", "reason", err.Error())
		a.upgradeRun.result.FollowKitError = err.Error()
		_ = os.RemoveAll(upgrade.FollowKitDir())
	}
}

// removeFollowKitLater removes the kit once the others have had their time to join by it.
func (a *Agent) removeFollowKitLater() {
	dir := a.majorUpgrade().FollowKitDir()
	time.AfterFunc(followKitKept, func() {
		if err := os.RemoveAll(dir); err != nil {
			a.Log.Error(err, "remove the follow kit")
		}
	})
}

// FollowKitDir is this instance's follow kit, if it keeps one.
func (a *Agent) FollowKitDir() (string, bool) {
	dir := a.majorUpgrade().FollowKitDir()
	_, err := postgres.ReadFollowKit(dir)
	return dir, err == nil
}

func handleFollowKit(mux *http.ServeMux, kits interface{ FollowKitDir() (string, bool) }, token func() string) {
	mux.Handle("GET "+agentapi.PathMajorUpgradeKit, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		dir, ok := kits.FollowKitDir()
		if !ok {
			http.Error(w, "no follow kit on this instance", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		if err := postgres.WriteFollowKit(w, dir); err != nil {
			// Past the header: the client must see a broken stream, not a short kit.
			panic(http.ErrAbortHandler)
		}
	})))
}

// rebuildByKit joins the new primary by its follow kit, this standby having replayed up to
// replayLSN before it stopped.
func (a *Agent) rebuildByKit(ctx context.Context, source *agentapi.FollowKitSource, replayLSN string) (string, error) {
	if replayLSN == "" {
		return "", errors.New("this instance was not a running standby: where its replay ended is unknown")
	}
	endpoint, err := a.kitEndpoint(source)
	if err != nil {
		return "", err
	}
	defer agentapi.ForgetTLS(endpoint.TLS)
	ctx, cancel := context.WithTimeout(ctx, followKitFetchTimeout)
	defer cancel()
	kit, err := agentapi.FetchFollowKit(ctx, endpoint)
	if err != nil {
		return "", fmt.Errorf("fetch the follow kit from %s: %w", source.Address, err)
	}
	defer func() { _ = kit.Close() }()
	copied, kept, err := a.Instance.JoinByFollowKit(kit, replayLSN)
	if err != nil {
		return "", fmt.Errorf("join by the follow kit: %w", err)
	}
	a.noteRebuild(func(r *agentapi.MajorUpgradeRebuildResult) { r.Copied, r.Kept = copied, kept })
	return agentapi.RebuildLinked, nil
}

// kitEndpoint reaches another agent of the cluster as the replication user.
func (a *Agent) kitEndpoint(source *agentapi.FollowKitSource) (agentapi.Endpoint, error) {
	if a.Config.TLSDir == "" {
		return agentapi.Endpoint{}, errors.New("this instance has no certificates to fetch a follow kit with")
	}
	read := func(name string) []byte {
		data, _ := os.ReadFile(filepath.Join(a.Config.TLSDir, name))
		return data
	}
	config, err := agentapi.ClientTLS(read(agentapi.TLSCAFile), read(agentapi.ReplicationCertFile),
		read(agentapi.ReplicationKeyFile), source.ServerName)
	if err != nil {
		return agentapi.Endpoint{}, err
	}
	return agentapi.Endpoint{Address: source.Address, Token: a.token(), TLS: config}, nil
}
