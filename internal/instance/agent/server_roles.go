package agent

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// roleChangeTimeout bounds a promotion or demotion: a fast shutdown, its immediate fallback,
// and a start.
const roleChangeTimeout = 110 * time.Second

func handleRoleChanges(mux *http.ServeMux, checks Checks, token func() string) {
	mux.Handle("POST "+agentapi.PathPromote, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.PromoteRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), roleChangeTimeout)
		defer cancel()
		answer, err := checks.Promote(ctx, req.Slots)
		writeRoleChange(w, answer, err)
	})))
	mux.Handle("POST "+agentapi.PathDemote, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), roleChangeTimeout)
		defer cancel()
		answer, err := checks.Demote(ctx)
		writeRoleChange(w, answer, err)
	})))
	mux.Handle("POST "+agentapi.PathFence, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), roleChangeTimeout)
		defer cancel()
		answer, err := checks.Fence(ctx)
		writeRoleChange(w, answer, err)
	})))
	mux.Handle("POST "+agentapi.PathDetach, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.DetachRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		answer, err := checks.Detach(ctx, req.From)
		writeRoleChange(w, answer, err)
	})))
	mux.Handle("POST "+agentapi.PathAttach, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		writeRoleChange(w, struct{}{}, checks.Attach(ctx))
	})))
}

func writeRoleChange(w http.ResponseWriter, answer any, err error) {
	switch {
	case errors.Is(err, agentapi.ErrWrongRole) || errors.Is(err, agentapi.ErrRestartInProgress):
		http.Error(w, err.Error(), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		writeJSON(w, answer)
	}
}
