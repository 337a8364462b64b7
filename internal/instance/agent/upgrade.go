package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// A major upgrade replaces the image before it touches the data: the instance then runs its data
// directory's major from the server carried out of the old image (Config.CarriedDir). An agent
// that starts over an upgrade interrupted mid-way (the container killed) puts the old cluster
// back if the upgrade had not passed its point of no return, and finishes it otherwise.

// majorUpgrade is an upgrade of this instance's data directory to the image's server.
func (a *Agent) majorUpgrade() *postgres.MajorUpgrade {
	return &postgres.MajorUpgrade{Old: a.Instance, NewBinDir: a.Config.BinDir}
}

// recoverMajorUpgrade ends what an interrupted upgrade left, before anything looks at the data
// directory; finished says it was past its point of no return and went forward.
func (a *Agent) recoverMajorUpgrade() (finished bool, err error) {
	step, err := a.majorUpgrade().Recover()
	if err != nil {
		return false, fmt.Errorf("recover the interrupted major upgrade (step %q): %w", step, err)
	}
	switch step {
	case "":
	case postgres.UpgradeCommitted:
		a.Log.Info("an interrupted major upgrade past its point of no return was finished", "step", step)
		return true, nil
	default:
		a.Log.Info("an interrupted major upgrade was reverted: the old major is back", "step", step)
	}
	return false, nil
}

// catchUpRecoveredUpgrade does, on the primary an interrupted upgrade was finished on, what the
// upgrade had left to do once the server took writes (the stanza, the first backup, extensions,
// statistics), in the background, reported as the upgrade's result.
func (a *Agent) catchUpRecoveredUpgrade(ctx context.Context) {
	to, err := a.Instance.BinariesMajor(ctx)
	if err != nil {
		a.Log.Error(err, "the finished major upgrade's catch-up")
		return
	}
	a.upgradeRun.mu.Lock()
	a.upgradeRun.result = &agentapi.MajorUpgradeResult{To: to, Step: agentapi.UpgradeStepStarted, StartedAt: time.Now().UTC().Format(time.RFC3339)}
	a.upgradeRun.mu.Unlock()
	go func() { a.endUpgradeRun(a.catchUpAfterMajorUpgrade(context.WithoutCancel(ctx))) }()
}

// runDataDirectoryMajor picks the carried server when the data directory is of its major.
func (a *Agent) runDataDirectoryMajor(ctx context.Context) error {
	carried, found, err := postgres.FindCarried(a.Config.CarriedDir)
	if err != nil || !found {
		return err
	}
	used, err := a.Instance.UseCarried(ctx, carried)
	if err != nil {
		return fmt.Errorf("run the carried PostgreSQL %d: %w", carried.Major, err)
	}
	if used {
		a.Log.Info("running the carried server of the data directory's major until its upgrade", "major", carried.Major)
	}
	return nil
}

// runningCarried is the carried server this instance runs and the image's major it would be
// upgraded to; ErrNothingToUpgrade when it runs the image's own server.
func (a *Agent) runningCarried(ctx context.Context) (postgres.Carried, int, error) {
	carried, found, err := postgres.FindCarried(a.Config.CarriedDir)
	if err != nil {
		return carried, 0, err
	}
	if !found || a.Instance.BinDir != carried.BinDir() {
		return carried, 0, agentapi.ErrNothingToUpgrade
	}
	to, err := (&postgres.Instance{BinDir: a.Config.BinDir}).BinariesMajor(ctx)
	return carried, to, err
}

// upgradeCheckTimeout bounds a check: the rehearsal restores every database's schema.
const upgradeCheckTimeout = 10 * time.Minute

// upgradeCheck is the latest check of a major upgrade.
type upgradeCheck struct {
	mu     sync.Mutex
	result *agentapi.MajorUpgradeCheckResult
}

// StartMajorUpgradeCheck starts the checks of an upgrade of the data directory to the image's
// major in the background, unless one runs (started false). The instance must be running the
// carried server of an older major.
func (a *Agent) StartMajorUpgradeCheck(ctx context.Context, req agentapi.MajorUpgradeCheckRequest) (started bool, err error) {
	c := &a.upgradeCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.result != nil && c.result.Phase == agentapi.UpgradeCheckRunning {
		return false, nil
	}
	carried, to, err := a.runningCarried(ctx)
	if err == nil && !a.Instance.Running() {
		err = agentapi.ErrNothingToUpgrade
	}
	if err != nil {
		return false, err
	}
	c.result = &agentapi.MajorUpgradeCheckResult{From: carried.Major, To: to, Mode: req.Mode,
		Phase: agentapi.UpgradeCheckRunning, StartedAt: time.Now().UTC().Format(time.RFC3339)}
	go a.runMajorUpgradeCheck(context.WithoutCancel(ctx), postgres.UpgradeMode(req.Mode))
	return true, nil
}

func (a *Agent) runMajorUpgradeCheck(ctx context.Context, mode postgres.UpgradeMode) {
	ctx, cancel := context.WithTimeout(ctx, upgradeCheckTimeout)
	defer cancel()
	upgrade := a.majorUpgrade()
	upgrade.Mode = mode
	problems, err := upgrade.CheckAll(ctx, a.connectTo)
	c := &a.upgradeCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.result
	r.StoppedAt = time.Now().UTC().Format(time.RFC3339)
	switch {
	case err != nil:
		r.Phase, r.Error = agentapi.UpgradeCheckError, err.Error()
	case len(problems) > 0:
		r.Phase, r.Problems = agentapi.UpgradeCheckFailed, problems
	default:
		r.Phase = agentapi.UpgradeCheckPassed
	}
	a.Log.Info("major upgrade check", "from", r.From, "to", r.To, "mode", mode, "phase", r.Phase, "problems", len(problems))
}

// MajorUpgradeCheckResult is a copy of the latest check, nil before any.
func (a *Agent) MajorUpgradeCheckResult() *agentapi.MajorUpgradeCheckResult {
	c := &a.upgradeCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.result == nil {
		return nil
	}
	copied := *c.result
	copied.Problems = append([]string(nil), c.result.Problems...)
	return &copied
}

// MajorUpgrades is the major upgrade's part of the agent's API.
type MajorUpgrades interface {
	StartMajorUpgradeCheck(ctx context.Context, req agentapi.MajorUpgradeCheckRequest) (started bool, err error)
	MajorUpgradeCheckResult() *agentapi.MajorUpgradeCheckResult
	StartMajorUpgrade(ctx context.Context, req agentapi.MajorUpgradeRequest) (started bool, err error)
	MajorUpgradeResult() *agentapi.MajorUpgradeResult
	StartMajorUpgradeRebuild(ctx context.Context, req agentapi.MajorUpgradeRebuildRequest) (started bool, err error)
	MajorUpgradeRebuildResult() *agentapi.MajorUpgradeRebuildResult
	FollowKitDir() (string, bool)
}

func handleMajorUpgrades(mux *http.ServeMux, upgrades MajorUpgrades, token func() string) {
	handleBackgroundJob(mux, token, agentapi.PathMajorUpgradeCheck, "major upgrade check",
		func(req agentapi.MajorUpgradeCheckRequest) string { return req.Mode },
		upgrades.StartMajorUpgradeCheck, upgrades.MajorUpgradeCheckResult)
	handleBackgroundJob(mux, token, agentapi.PathMajorUpgrade, "major upgrade",
		func(req agentapi.MajorUpgradeRequest) string { return req.Mode },
		upgrades.StartMajorUpgrade, upgrades.MajorUpgradeResult)
	handleBackgroundJob(mux, token, agentapi.PathMajorUpgradeRebuild, "rebuild on the new major", nil,
		upgrades.StartMajorUpgradeRebuild, upgrades.MajorUpgradeRebuildResult)
	handleFollowKit(mux, upgrades, token)
}

// handleBackgroundJob serves a job the agent runs in the background at path: POST starts it
// (202 with its result, 200 when one runs already, 409 when the instance cannot run it), GET
// answers its latest result (404 before any). mode, when set, is the request's upgrade mode,
// checked here.
func handleBackgroundJob[Request, Result any](mux *http.ServeMux, token func() string, path, what string, mode func(Request) string,
	start func(context.Context, Request) (bool, error), result func() *Result) {
	mux.Handle("POST "+path, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if !decodeRequest(w, r, &req) {
			return
		}
		if mode != nil {
			if m := mode(req); m != string(postgres.UpgradeLink) && m != string(postgres.UpgradeCopy) {
				http.Error(w, "bad request: the mode is link or copy", http.StatusBadRequest)
				return
			}
		}
		started, err := start(r.Context(), req)
		switch {
		case errors.Is(err, agentapi.ErrNothingToUpgrade) || errors.Is(err, agentapi.ErrWrongRole):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case started:
			writeJSONStatus(w, http.StatusAccepted, result())
		default:
			writeJSON(w, result())
		}
	})))
	mux.Handle("GET "+path, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		latest := result()
		if latest == nil {
			http.Error(w, "no "+what+" on this instance", http.StatusNotFound)
			return
		}
		writeJSON(w, latest)
	})))
}
