package agent

import (
	"net/http"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// ManagedCatalog is the managed catalog endpoint's work (managed_catalog.go).
type ManagedCatalog interface {
	ApplyCatalog(req agentapi.CatalogRequest) error
	CatalogReport() *agentapi.CatalogReport
}

// catalogRequestLimit bounds a CatalogRequest: the CRD's 500 roles with their memberships, and
// hundreds of Databases with their schemas and extensions.
const catalogRequestLimit = 8 << 20

func handleManagedCatalog(mux *http.ServeMux, roles ManagedCatalog, token func() string) {
	mux.Handle("PUT "+agentapi.PathCatalog, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.CatalogRequest
		if !decodeRequestUpTo(w, r, catalogRequestLimit, &req) {
			return
		}
		if err := roles.ApplyCatalog(req); err != nil {
			writeRoleChange(w, nil, err)
			return
		}
		writeJSONStatus(w, http.StatusAccepted, struct{}{})
	})))
	mux.Handle("GET "+agentapi.PathCatalog, requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		report := roles.CatalogReport()
		if report == nil {
			http.Error(w, "no managed roles given", http.StatusNotFound)
			return
		}
		writeJSON(w, report)
	})))
}
