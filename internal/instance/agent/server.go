// Package agent is the instance agent: it bootstraps and supervises the pod's PostgreSQL and
// tells the operator the truth about it over HTTP.
package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/version"
)

// probeTimeout bounds each check behind an endpoint; the kubelet's own timeout is longer.
const probeTimeout = 3 * time.Second

// Checks are what the endpoints ask of the running instance.
type Checks interface {
	// Alive reports whether the postmaster process runs.
	Alive() bool
	// Ready reports whether the server accepts connections.
	Ready(ctx context.Context) error
	// Status queries the server's role, positions and replication.
	Status(ctx context.Context) (*agentapi.Status, error)
	// DropInactiveSlots drops the named replication slots no standby uses.
	DropInactiveSlots(ctx context.Context, names []string) ([]string, error)
	// StartRestart begins a restart of PostgreSQL in the background; false when one is
	// already in progress.
	StartRestart() bool
	// Promote and Demote change the instance's role (roles.go).
	Promote(ctx context.Context, slots []string) (*agentapi.PromoteResponse, error)
	Demote(ctx context.Context) (*agentapi.DemoteResponse, error)
	// Fence stops a primary at once and holds it down until the Lease is granted again.
	Fence(ctx context.Context) (*agentapi.Status, error)
	// Detach holds a standby off streaming from a primary the operator cannot reach; Attach
	// ends the hold (detach.go).
	Detach(ctx context.Context, from string) (*agentapi.Status, error)
	Attach(ctx context.Context) error
}

// NewHandler serves the probes without authentication (the kubelet calls them) and the status
// only to callers presenting the token, which the operator reads from the cluster's agent Secret.
func NewHandler(checks Checks, token func() string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+agentapi.PathLiveness, func(w http.ResponseWriter, _ *http.Request) {
		if !checks.Alive() {
			http.Error(w, "postgres is not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	ready := func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		// Unauthenticated: anyone who reaches the pod may ask, so the answer says no more than
		// ready or not (the status, behind the token, and the agent's log say why).
		if err := checks.Ready(ctx); err != nil {
			http.Error(w, "not accepting connections", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("GET "+agentapi.PathReadiness, ready)
	mux.HandleFunc("GET "+agentapi.PathStartup, ready)
	mux.Handle("GET "+agentapi.PathStatus, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		status, err := checks.Status(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		status.Version = version.Version
		writeJSON(w, status)
	})))
	mux.Handle("POST "+agentapi.PathDropSlots, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.DropSlotsRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		dropped, err := checks.DropInactiveSlots(ctx, req.Slots)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, agentapi.DropSlotsResponse{Dropped: dropped})
	})))
	mux.Handle("POST "+agentapi.PathRestart, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Asynchronous, so that the operator's reconcile never waits on a restart: it watches
		// the instance go unready and come back instead.
		if !checks.StartRestart() {
			http.Error(w, agentapi.ErrRestartInProgress.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("restarting"))
	})))
	handleRoleChanges(mux, checks, token)
	if backups, ok := checks.(Backups); ok {
		handleBackups(mux, backups, token)
	}
	if upgrades, ok := checks.(MajorUpgrades); ok {
		handleMajorUpgrades(mux, upgrades, token)
	}
	if roles, ok := checks.(ManagedCatalog); ok {
		handleManagedCatalog(mux, roles, token)
	}
	return mux
}

func requireToken(token func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		want := token() // the latest from the credential files: a rotated token works at once
		if !ok || want == "" || subtle.ConstantTimeCompare([]byte(presented), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgpilot-agent"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decodeRequest reads a JSON body of at most 64 KiB into into, answering 400 when it cannot.
func decodeRequest(w http.ResponseWriter, r *http.Request, into any) bool {
	return decodeRequestUpTo(w, r, 64<<10, into)
}

func decodeRequestUpTo(w http.ResponseWriter, r *http.Request, limit int64, into any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit)).Decode(into); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, answer any) { writeJSONStatus(w, http.StatusOK, answer) }

func writeJSONStatus(w http.ResponseWriter, code int, answer any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(answer)
}
