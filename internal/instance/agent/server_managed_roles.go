package agent

import (
	"context"
	"net/http"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// ManagedRoles are the managed roles endpoint's work (managed_roles.go).
type ManagedRoles interface {
	ApplyRoles(ctx context.Context, req agentapi.RolesRequest) (*agentapi.RolesReport, error)
	RolesReport() *agentapi.RolesReport
}

// rolesRequestLimit bounds a RolesRequest: the CRD's 500 roles with their memberships.
const rolesRequestLimit = 1 << 20

func handleManagedRoles(mux *http.ServeMux, roles ManagedRoles, token func() string) {
	mux.Handle("PUT "+agentapi.PathRoles, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.RolesRequest
		if !decodeRequestUpTo(w, r, rolesRequestLimit, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), rolesPassTimeout)
		defer cancel()
		report, err := roles.ApplyRoles(ctx, req)
		writeRoleChange(w, report, err)
	})))
	mux.Handle("GET "+agentapi.PathRoles, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		report := roles.RolesReport()
		if report == nil {
			http.Error(w, "no managed roles given", http.StatusNotFound)
			return
		}
		writeJSON(w, report)
	})))
}
