package agent

import (
	"context"
	"errors"
	"net/http"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// Backups are the backup endpoints' work (backups.go).
type Backups interface {
	StartBackup(ctx context.Context, req agentapi.BackupRequest) (started bool, err error)
	BackupResult(name string) *agentapi.BackupResult
}

func handleBackups(mux *http.ServeMux, backups Backups, token func() string) {
	mux.Handle("POST "+agentapi.PathBackups, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.BackupRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		if req.Name == "" || !validBackupType(req.Type) {
			http.Error(w, "bad request: a backup needs a name and a type of full, diff or incr", http.StatusBadRequest)
			return
		}
		started, err := backups.StartBackup(r.Context(), req)
		switch {
		case errors.Is(err, ErrBackupRunning) || errors.Is(err, ErrNotPrimary):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case started:
			writeJSONStatus(w, http.StatusAccepted, backups.BackupResult(req.Name))
		default:
			writeJSON(w, backups.BackupResult(req.Name))
		}
	})))
	mux.Handle("GET "+agentapi.PathBackup, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		result := backups.BackupResult(r.PathValue("name"))
		if result == nil {
			http.Error(w, "no such backup on this instance", http.StatusNotFound)
			return
		}
		writeJSON(w, result)
	})))
}

func validBackupType(t string) bool { return t == "full" || t == "diff" || t == "incr" }
