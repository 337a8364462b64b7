package agent

import (
	"net/http"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// ManagedRoles are the managed roles endpoint's work (managed_roles.go).
type ManagedRoles interface {
	ApplyRoles(req agentapi.RolesRequest) error
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
		if err := roles.ApplyRoles(req); err != nil {
			writeRoleChange(w, nil, err)
			return
		}
		writeJSONStatus(w, http.StatusAccepted, struct{}{})
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
