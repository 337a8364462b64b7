package agent

import (
	"context"
	"fmt"

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
// directory.
func (a *Agent) recoverMajorUpgrade() error {
	step, err := a.majorUpgrade().Recover()
	if err != nil {
		return fmt.Errorf("recover the interrupted major upgrade (step %q): %w", step, err)
	}
	switch step {
	case "":
	case postgres.UpgradeCommitted:
		a.Log.Info("an interrupted major upgrade past its point of no return was finished", "step", step)
	default:
		a.Log.Info("an interrupted major upgrade was reverted: the old major is back", "step", step)
	}
	return nil
}

// runDataDirectoryMajor picks the carried server when the data directory is of its major.
func (a *Agent) runDataDirectoryMajor(ctx context.Context) error {
	if a.Config.CarriedDir == "" {
		return nil
	}
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
