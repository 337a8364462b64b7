package agent_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// checks stands in for the running instance, so the operator's client and the agent's server
// are tested against each other over real HTTP.
type checks struct {
	status        *agentapi.Status
	restarting    bool
	dropped       []string
	promotedSlots []string
	detachedFrom  string
	attached      bool
	notReady      error
}

func (c *checks) Alive() bool { return true }
func (c *checks) Ready(context.Context) error {
	if c.notReady != nil {
		return c.notReady
	}
	return nil
}
func (c *checks) Status(context.Context) (*agentapi.Status, error) { return c.status, nil }
func (c *checks) StartRestart() bool                               { return !c.restarting }
func (c *checks) Promote(_ context.Context, slots []string) (*agentapi.PromoteResponse, error) {
	if c.status.Role == agentapi.RolePrimary {
		return nil, agentapi.ErrWrongRole
	}
	c.promotedSlots = slots
	return &agentapi.PromoteResponse{Timeline: c.status.Timeline + 1}, nil
}
func (c *checks) Demote(context.Context) (*agentapi.DemoteResponse, error) {
	if c.status.Role != agentapi.RolePrimary {
		return nil, agentapi.ErrWrongRole
	}
	return &agentapi.DemoteResponse{ShutdownLSN: "0/3000100", Clean: true}, nil
}
func (c *checks) Fence(context.Context) (*agentapi.Status, error) {
	if c.status.Role != agentapi.RolePrimary {
		return nil, agentapi.ErrWrongRole
	}
	return &agentapi.Status{Fenced: true, FencedReason: "fenced by the operator", LeaseTransitions: 4}, nil
}
func (c *checks) Detach(_ context.Context, from string) (*agentapi.Status, error) {
	if c.status.Role != agentapi.RoleReplica {
		return nil, agentapi.ErrWrongRole
	}
	c.detachedFrom = from
	return &agentapi.Status{Role: agentapi.RoleReplica, DetachedFrom: from, DetachedMillis: 1500}, nil
}
func (c *checks) Attach(context.Context) error {
	c.attached = true
	return nil
}
func (c *checks) DropInactiveSlots(_ context.Context, names []string) ([]string, error) {
	c.dropped = names
	return names[:1], nil
}

func TestClientAndServerAgree(t *testing.T) {
	want := &agentapi.Status{Role: agentapi.RoleReplica, Timeline: 2, ReplayLSN: "0/3000060", Streaming: true,
		PendingRestart: []string{"max_connections"}}
	c := &checks{status: want}
	server := httptest.NewServer(agent.NewHandler(c, func() string { return token }))
	defer server.Close()
	ctx := context.Background()
	endpoint := agentapi.Endpoint{Address: strings.TrimPrefix(server.URL, "http://"), Token: token}
	client := agentapi.HTTPClient{}

	got, err := client.Status(ctx, endpoint)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("status %+v, %v; want %+v", got, err, want)
	}
	dropped, err := client.DropSlots(ctx, endpoint, []string{"db_3", "db_4"})
	if err != nil || !slices.Equal(dropped, []string{"db_3"}) || !slices.Equal(c.dropped, []string{"db_3", "db_4"}) {
		t.Errorf("drop slots: dropped %v (asked %v), %v", dropped, c.dropped, err)
	}
	if err := client.Restart(ctx, endpoint); err != nil {
		t.Errorf("restart: %v", err)
	}
	c.restarting = true
	if err := client.Restart(ctx, endpoint); !errors.Is(err, agentapi.ErrRestartInProgress) {
		t.Errorf("restart while restarting: %v, want ErrRestartInProgress", err)
	}
	promoted, err := client.Promote(ctx, endpoint, []string{"db_0"})
	if err != nil || promoted.Timeline != 3 || !slices.Equal(c.promotedSlots, []string{"db_0"}) {
		t.Errorf("promote: %+v (slots %v), %v", promoted, c.promotedSlots, err)
	}
	if _, err := client.Demote(ctx, endpoint); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Errorf("demote of a replica: %v, want ErrWrongRole", err)
	}
	if detached, err := client.Detach(ctx, endpoint, "db-0"); err != nil || detached.DetachedFrom != "db-0" || detached.DetachedMillis != 1500 || c.detachedFrom != "db-0" {
		t.Errorf("detach: %+v (from %q), %v", detached, c.detachedFrom, err)
	}
	if err := client.Attach(ctx, endpoint); err != nil || !c.attached {
		t.Errorf("attach: %v (attached %v)", err, c.attached)
	}
	c.status.Role = agentapi.RolePrimary
	if demoted, err := client.Demote(ctx, endpoint); err != nil || demoted.ShutdownLSN != "0/3000100" || !demoted.Clean {
		t.Errorf("demote: %+v, %v", demoted, err)
	}
	if _, err := client.Promote(ctx, endpoint, nil); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Errorf("promote of a primary: %v, want ErrWrongRole", err)
	}
	if fenced, err := client.Fence(ctx, endpoint); err != nil || !fenced.Fenced || fenced.LeaseTransitions != 4 {
		t.Errorf("fence: %+v, %v", fenced, err)
	}
	if _, err := client.Detach(ctx, endpoint, "db-1"); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Errorf("detach of a primary: %v, want ErrWrongRole", err)
	}
	// An agent of an older release serves no detach: the operator falls back to watching streams.
	older := httptest.NewServer(http.NotFoundHandler())
	defer older.Close()
	if _, err := client.Detach(ctx, agentapi.Endpoint{Address: strings.TrimPrefix(older.URL, "http://"), Token: token}, "db-1"); !errors.Is(err, agentapi.ErrNotSupported) {
		t.Errorf("detach from an older agent: %v, want ErrNotSupported", err)
	}
	wrong := agentapi.Endpoint{Address: endpoint.Address, Token: "not-" + token}
	if _, err := client.Status(ctx, wrong); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("status with a wrong token: %v, want 401", err)
	}
	if _, err := client.Status(ctx, agentapi.Endpoint{Token: token}); err == nil {
		t.Error("status without an address succeeded")
	}
}

// The probes answer anyone who reaches the pod, without a token: they say ready or not, never
// what an error says about the inside (paths, roles, addresses).
func TestProbesTellNoInternalDetail(t *testing.T) {
	c := &checks{status: &agentapi.Status{}, notReady: errors.New(`dial unix /var/run/postgresql/.s.PGSQL.5432: role "pgpilot_monitor" at 10.244.0.7`)}
	server := httptest.NewServer(agent.NewHandler(c, func() string { return token }))
	defer server.Close()
	for _, path := range []string{agentapi.PathReadiness, agentapi.PathStartup} {
		resp, err := http.Get(server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "/var/run") ||
			strings.Contains(string(body), "pgpilot_monitor") || strings.Contains(string(body), "10.244") {
			t.Errorf("%s answered %d %q", path, resp.StatusCode, body)
		}
	}
}

// upgrades stands in for an instance that runs an older major's carried server, or not.
type upgrades struct {
	checks
	carried bool
	result  *agentapi.MajorUpgradeCheckResult
	rebuild *agentapi.MajorUpgradeRebuildResult
}

func (u *upgrades) StartMajorUpgradeCheck(_ context.Context, req agentapi.MajorUpgradeCheckRequest) (bool, error) {
	if !u.carried {
		return false, agentapi.ErrNothingToUpgrade
	}
	if u.result != nil && u.result.Phase == agentapi.UpgradeCheckRunning {
		return false, nil
	}
	u.result = &agentapi.MajorUpgradeCheckResult{From: 15, To: 17, Mode: req.Mode, Phase: agentapi.UpgradeCheckRunning}
	return true, nil
}
func (u *upgrades) MajorUpgradeCheckResult() *agentapi.MajorUpgradeCheckResult { return u.result }
func (u *upgrades) FollowKitDir() (string, bool)                               { return "", false }
func (u *upgrades) StartMajorUpgrade(context.Context, agentapi.MajorUpgradeRequest) (bool, error) {
	return false, agentapi.ErrWrongRole
}
func (u *upgrades) MajorUpgradeResult() *agentapi.MajorUpgradeResult { return nil }
func (u *upgrades) StartMajorUpgradeRebuild(_ context.Context, req agentapi.MajorUpgradeRebuildRequest) (bool, error) {
	if !u.carried {
		return false, agentapi.ErrWrongRole
	}
	u.rebuild = &agentapi.MajorUpgradeRebuildResult{Reason: "label " + req.BackupLabel}
	return true, nil
}
func (u *upgrades) MajorUpgradeRebuildResult() *agentapi.MajorUpgradeRebuildResult { return u.rebuild }

func TestMajorUpgradeCheckOverTheAPI(t *testing.T) {
	u := &upgrades{checks: checks{status: &agentapi.Status{}}}
	server := httptest.NewServer(agent.NewHandler(u, func() string { return token }))
	defer server.Close()
	ctx := context.Background()
	endpoint := agentapi.Endpoint{Address: strings.TrimPrefix(server.URL, "http://"), Token: token}
	client := agentapi.HTTPClient{}

	if result, err := client.MajorUpgradeCheck(ctx, endpoint); err != nil || result != nil {
		t.Fatalf("check before any = %+v, %v; want none", result, err)
	}
	if _, err := client.StartMajorUpgradeCheck(ctx, endpoint, agentapi.MajorUpgradeCheckRequest{Mode: "link"}); !errors.Is(err, agentapi.ErrNothingToUpgrade) {
		t.Fatalf("check on an instance of its image's major: %v, want ErrNothingToUpgrade", err)
	}
	u.carried = true
	if _, err := client.StartMajorUpgradeCheck(ctx, endpoint, agentapi.MajorUpgradeCheckRequest{Mode: "swap"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("check in an unknown mode: %v, want 400", err)
	}
	started, err := client.StartMajorUpgradeCheck(ctx, endpoint, agentapi.MajorUpgradeCheckRequest{Mode: "copy"})
	if err != nil || started.Phase != agentapi.UpgradeCheckRunning || started.Mode != "copy" {
		t.Fatalf("start = %+v, %v", started, err)
	}
	u.result.Phase, u.result.Problems = agentapi.UpgradeCheckFailed, []string{"extension x in app is not in the new image"}
	if got, err := client.MajorUpgradeCheck(ctx, endpoint); err != nil || !reflect.DeepEqual(got, u.result) {
		t.Fatalf("check = %+v, %v; want %+v", got, err, u.result)
	}
	if _, err := client.StartMajorUpgrade(ctx, endpoint, agentapi.MajorUpgradeRequest{Mode: "link"}); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Fatalf("upgrade of an instance that may not: %v, want ErrWrongRole", err)
	}
	if result, err := client.MajorUpgrade(ctx, endpoint); err != nil || result != nil {
		t.Fatalf("upgrade before any = %+v, %v; want none", result, err)
	}
	// The rebuild on the new major: no mode, the backup's label passed on.
	if result, err := client.MajorUpgradeRebuild(ctx, endpoint); err != nil || result != nil {
		t.Fatalf("rebuild before any = %+v, %v; want none", result, err)
	}
	if result, err := client.StartMajorUpgradeRebuild(ctx, endpoint, agentapi.MajorUpgradeRebuildRequest{BackupLabel: "20261206-031500F"}); err != nil || result.Reason != "label 20261206-031500F" {
		t.Fatalf("rebuild = %+v, %v", result, err)
	}
	u.carried = false
	if _, err := client.StartMajorUpgradeRebuild(ctx, endpoint, agentapi.MajorUpgradeRebuildRequest{}); !errors.Is(err, agentapi.ErrWrongRole) {
		t.Fatalf("rebuild of an instance on its image's major: %v, want ErrWrongRole", err)
	}
	older := httptest.NewServer(agent.NewHandler(&checks{status: &agentapi.Status{}}, func() string { return token }))
	defer older.Close()
	if _, err := client.StartMajorUpgradeCheck(ctx, agentapi.Endpoint{Address: strings.TrimPrefix(older.URL, "http://"), Token: token}, agentapi.MajorUpgradeCheckRequest{Mode: "link"}); !errors.Is(err, agentapi.ErrNotSupported) {
		t.Fatalf("check on an agent without upgrades: %v, want ErrNotSupported", err)
	}
}
