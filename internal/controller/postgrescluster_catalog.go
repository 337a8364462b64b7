package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// The managed catalog — spec.roles and the cluster's Database objects — runs in a lane of its
// own: a role or database the server refuses, a missing Secret or a primary's agent that is slow
// to apply never holds the children or failover. The operator sends the primary's agent the
// declared set only when it, or its Secrets, changed since it last did, or when the primary holds
// another set (a new primary after a failover); it reads the agent's report only when the agent
// says it moved (Status.Catalog). The role Secrets are the user's, outside the label-scoped
// cache: they are read from the API server when the declaration changed, when the primary needs
// the set, and otherwise once a rolesSecretsInterval, the delay of a password rotation.

// rolesSecretsInterval is how often the role Secrets are read for a rotation.
const rolesSecretsInterval = time.Minute

// CatalogAgents are what the managed catalog asks of the primary's agent.
type CatalogAgents interface {
	ApplyCatalog(ctx context.Context, e agentapi.Endpoint, req agentapi.CatalogRequest) error
	CatalogReport(ctx context.Context, e agentapi.Endpoint) (*agentapi.CatalogReport, error)
}

func (r *PostgresClusterReconciler) catalogAgents() CatalogAgents {
	if r.CatalogAgents != nil {
		return r.CatalogAgents
	}
	return agentapi.HTTPClient{}
}

// catalogLane keeps spec.roles and the cluster's Databases on the primary.
func (r *PostgresClusterReconciler) catalogLane() []stage {
	return []stage{{"catalog", r.ensureCatalog}}
}

func (r *PostgresClusterReconciler) ensureCatalog(ctx context.Context, s *scope) (*stop, error) {
	c := s.cluster
	databases, err := r.clusterDatabases(ctx, c.Namespace, c.Name)
	if err != nil {
		return nil, err
	}
	if len(c.Spec.Roles) == 0 && len(c.Status.Roles) == 0 && len(databases) == 0 {
		return nil, nil
	}
	if err := r.ensureDatabaseFinalizers(ctx, databases); err != nil {
		return nil, err
	}
	declared, refused := pgbuilder.DeclaredDatabases(databases)
	pod, report := s.observed.Pod(s.primary), s.observed.Reports[s.primary]
	if pod == nil || report == nil || report.Role != agentapi.RolePrimary || s.majorUpgrade.Running() {
		return nil, r.writeDatabaseStatuses(ctx, databases, nil, refused) // applied once there is a primary
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	held := ""
	if report.Catalog != nil {
		held = report.Catalog.Fingerprint
	}
	seen, specHash := r.memory().roles.get(key), pgbuilder.CatalogSpecHash(c, databases)
	if seen.due(specHash, held, time.Now()) {
		req, problems, err := r.catalogRequest(ctx, c, declared)
		if err != nil {
			return nil, err
		}
		seen = rolesSeen{specHash: specHash, fingerprint: req.Fingerprint, readAt: time.Now(), problems: problems}
		r.memory().roles.set(key, seen)
		if held != req.Fingerprint {
			err := r.catalogAgents().ApplyCatalog(ctx, r.endpoint(s, pod), req)
			if errors.Is(err, agentapi.ErrNotSupported) {
				const old = "the primary's agent predates managed roles and databases: it applies them once it runs this release"
				r.setRolesStatus(s, pendingRoles(c, old))
				return nil, r.writeDatabaseStatuses(ctx, databases, nil, refused)
			}
			if err != nil {
				return nil, fmt.Errorf("apply catalog on %s: %w", s.primary, err)
			}
			// The agent's status says when its report moved.
			return nil, r.writeDatabaseStatuses(ctx, databases, nil, refused)
		}
	}
	if report.Catalog == nil || report.Catalog.Report == "" || report.Catalog.Report == c.Status.CatalogReported {
		return nil, nil
	}
	answer, err := r.catalogAgents().CatalogReport(ctx, r.endpoint(s, pod))
	if err != nil || answer == nil {
		return nil, err
	}
	if answer.Fingerprint == seen.fingerprint {
		if err := r.writeDatabaseStatuses(ctx, databases, answer, refused); err != nil {
			return nil, err
		}
	}
	r.setRolesStatus(s, rolesStatus(answer, seen.problems))
	return nil, nil
}

// catalogRequest reads the role Secrets and builds the set to send.
func (r *PostgresClusterReconciler) catalogRequest(ctx context.Context, c *pgv1.PostgresCluster, databases []*pgv1.Database) (agentapi.CatalogRequest, map[string]string, error) {
	secrets := map[string]*corev1.Secret{}
	for _, name := range pgbuilder.RoleSecretNames(c) {
		secret := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, secret)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return agentapi.CatalogRequest{}, nil, fmt.Errorf("get role secret %s: %w", name, err)
		}
		secrets[name] = secret
	}
	req, problems := pgbuilder.BuildCatalogRequest(c, secrets, databases)
	return req, problems, nil
}

// rolesStatus is status.roles from the agent's report and the Secrets' problems; a problem is
// the role's message unless the server had something to say.
func rolesStatus(report *agentapi.CatalogReport, problems map[string]string) rolesOutcome {
	out := rolesOutcome{reported: report.ID()}
	for _, result := range report.Roles {
		st := pgv1.ManagedRoleStatus{Name: result.Name, State: result.State, Changed: result.Changed, Message: result.Message}
		if st.Message == "" {
			st.Message = problems[result.Name]
		}
		out.roles = append(out.roles, st)
	}
	return out
}

func pendingRoles(c *pgv1.PostgresCluster, message string) rolesOutcome {
	out := rolesOutcome{}
	for _, role := range c.Spec.Roles {
		out.roles = append(out.roles, pgv1.ManagedRoleStatus{Name: role.Name, State: agentapi.ItemPending, Message: message})
	}
	return out
}

type rolesOutcome struct {
	roles    []pgv1.ManagedRoleStatus
	reported string
}

// setRolesStatus records the outcome, with an Event for each role whose state or changes are
// news: drift and errors as Warnings.
func (r *PostgresClusterReconciler) setRolesStatus(s *scope, out rolesOutcome) {
	before := map[string]pgv1.ManagedRoleStatus{}
	for _, st := range s.cluster.Status.Roles {
		before[st.Name] = st
	}
	for _, st := range out.roles {
		old, known := before[st.Name]
		news := !known || old.State != st.State || old.Message != st.Message || !slices.Equal(old.Changed, st.Changed)
		switch {
		case !news:
		case st.State == agentapi.RoleDrift:
			r.event(s.cluster, nil, corev1.EventTypeWarning, "RoleDrift", "ApplyCatalog", "role %s was changed by hand and put back: %v", st.Name, st.Changed)
		case st.State == agentapi.RoleError:
			r.event(s.cluster, nil, corev1.EventTypeWarning, "RoleFailed", "ApplyCatalog", "role %s: %s", st.Name, st.Message)
		case st.Message != "":
			r.event(s.cluster, nil, corev1.EventTypeWarning, "RolePasswordKept", "ApplyCatalog", "role %s: %s", st.Name, st.Message)
		case len(st.Changed) > 0:
			r.event(s.cluster, nil, corev1.EventTypeNormal, "RoleApplied", "ApplyCatalog", "role %s: %v", st.Name, st.Changed)
		}
	}
	s.cluster.Status.Roles, s.cluster.Status.CatalogReported = out.roles, out.reported
}

// rolesSeen is what the operator last sent a cluster's primary.
type rolesSeen struct {
	specHash, fingerprint string
	readAt                time.Time
	problems              map[string]string
}

// due: the Secrets must be read again and the set perhaps sent.
func (seen rolesSeen) due(specHash, held string, now time.Time) bool {
	return seen.specHash != specHash || held != seen.fingerprint || now.Sub(seen.readAt) >= rolesSecretsInterval
}

type rolesMemory struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]rolesSeen
}

func (m *rolesMemory) get(key types.NamespacedName) rolesSeen {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[key]
}

func (m *rolesMemory) set(key types.NamespacedName, seen rolesSeen) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[types.NamespacedName]rolesSeen{}
	}
	m.seen[key] = seen
}

func (m *rolesMemory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, key)
}
