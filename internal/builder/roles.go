package builder

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// CatalogSpecHash identifies spec.roles, the names they may not take, and the cluster's
// Databases (each one's generation, and whether it is going).
func CatalogSpecHash(c *pgv1.PostgresCluster, databases []pgv1.Database) string {
	type databaseVersion struct {
		UID        string
		Generation int64
		Deleting   bool
	}
	versions := make([]databaseVersion, len(databases))
	for i, db := range databases {
		versions[i] = databaseVersion{string(db.UID), db.Generation, !db.DeletionTimestamp.IsZero()}
	}
	data, _ := json.Marshal(struct {
		Roles        []pgv1.ManagedRoleSpec
		Owner, AppDB string
		Databases    []databaseVersion
	}{c.Spec.Roles, c.Spec.Bootstrap.InitDB.Owner, c.Spec.Bootstrap.InitDB.Database, versions})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// RoleSecretNames are the Secrets spec.roles take passwords from, each once, sorted.
func RoleSecretNames(c *pgv1.PostgresCluster) []string {
	var names []string
	for _, role := range c.Spec.Roles {
		if role.PasswordSecret != nil && !slices.Contains(names, role.PasswordSecret.Name) {
			names = append(names, role.PasswordSecret.Name)
		}
	}
	slices.Sort(names)
	return names
}

// BuildCatalogRequest is what the primary's agent is given for spec.roles, with the passwords of
// secrets (by name; a missing one is absent), and for databases (DeclaredDatabases). problems
// says, by role, why its password is kept as the server has it. The fingerprint covers the
// declarations and the Secrets' versions, never a password.
func BuildCatalogRequest(c *pgv1.PostgresCluster, secrets map[string]*corev1.Secret, databases []*pgv1.Database) (req agentapi.CatalogRequest, problems map[string]string) {
	problems = map[string]string{}
	req = agentapi.CatalogRequest{Roles: []agentapi.ManagedRole{}, Forbidden: []string{c.Spec.Bootstrap.InitDB.Owner},
		ForbiddenDatabases: []string{c.Spec.Bootstrap.InitDB.Database}}
	for _, db := range databases {
		req.Databases = append(req.Databases, managedDatabase(db))
	}
	versions := map[string]string{}
	for _, spec := range c.Spec.Roles {
		role := agentapi.ManagedRole{Name: spec.Name, Absent: spec.Ensure == pgv1.RoleAbsent, Login: spec.Login,
			Inherit: ptr.Deref(spec.Inherit, true), CreateDB: spec.CreateDB, CreateRole: spec.CreateRole,
			ConnectionLimit: ptr.Deref(spec.ConnectionLimit, -1), Comment: spec.Comment,
			InRoles: slices.Clone(spec.InRoles), DisablePassword: spec.DisablePassword}
		if spec.ValidUntil != nil {
			role.ValidUntil = ptr.To(spec.ValidUntil.UTC())
		}
		if spec.PasswordSecret != nil {
			name := spec.PasswordSecret.Name
			password, problem := rolePassword(secrets[name], name, spec.Name)
			if problem != "" {
				problems[spec.Name] = problem
			} else {
				role.Password = &password
				versions[name] = secrets[name].ResourceVersion
			}
		}
		req.Roles = append(req.Roles, role)
	}
	req.Fingerprint = catalogFingerprint(req, versions)
	return req, problems
}

// rolePassword is the password secret holds for role, or why it holds none to use.
func rolePassword(secret *corev1.Secret, name, role string) (string, string) {
	switch {
	case secret == nil:
		return "", fmt.Sprintf("Secret %q does not exist: the role keeps the password it has", name)
	case len(secret.Data[corev1.BasicAuthPasswordKey]) == 0:
		return "", fmt.Sprintf("Secret %q has no %q key, or it is empty: the role keeps the password it has", name, corev1.BasicAuthPasswordKey)
	case len(secret.Data[corev1.BasicAuthUsernameKey]) > 0 && string(secret.Data[corev1.BasicAuthUsernameKey]) != role:
		return "", fmt.Sprintf("Secret %q is for the role %q, not %q: the role keeps the password it has", name, secret.Data[corev1.BasicAuthUsernameKey], role)
	}
	return string(secret.Data[corev1.BasicAuthPasswordKey]), ""
}

func catalogFingerprint(req agentapi.CatalogRequest, secretVersions map[string]string) string {
	withoutPasswords := slices.Clone(req.Roles)
	for i := range withoutPasswords {
		withoutPasswords[i].Password = nil
	}
	data, _ := json.Marshal(struct {
		Roles              []agentapi.ManagedRole
		Forbidden          []string
		Versions           map[string]string
		Databases          []agentapi.ManagedDatabase
		ForbiddenDatabases []string
	}{withoutPasswords, req.Forbidden, secretVersions, req.Databases, req.ForbiddenDatabases})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// managedDatabase is a Database as the agent applies it: dropped when it goes with reclaimPolicy
// delete, schemas owned by the database's owner unless they say otherwise.
func managedDatabase(db *pgv1.Database) agentapi.ManagedDatabase {
	spec := db.Spec
	out := agentapi.ManagedDatabase{Name: spec.Name, Owner: spec.Owner, Encoding: spec.Encoding, Locale: spec.Locale,
		ConnectionLimit: ptr.Deref(spec.ConnectionLimit, -1),
		Absent:          !db.DeletionTimestamp.IsZero() && spec.ReclaimPolicy == pgv1.ReclaimDelete}
	for _, schema := range spec.Schemas {
		out.Schemas = append(out.Schemas, agentapi.ManagedSchema{Name: schema.Name, Owner: cmp.Or(schema.Owner, spec.Owner),
			Absent: schema.Ensure == pgv1.RoleAbsent})
	}
	for _, ext := range spec.Extensions {
		out.Extensions = append(out.Extensions, agentapi.ManagedExtension{Name: ext.Name, Version: ext.Version, Schema: ext.Schema,
			Absent: ext.Ensure == pgv1.RoleAbsent})
	}
	return out
}

// DeclaredDatabases are the Databases of a cluster the agent is given, oldest first, and why each
// of the others is not: one that names a database an older one declares. A Database that is
// going with reclaimPolicy retain is left out (its database stays as it is); one going with
// delete stays until its database is dropped.
func DeclaredDatabases(databases []pgv1.Database) (declared []*pgv1.Database, refused map[string]string) {
	sorted := make([]*pgv1.Database, len(databases))
	for i := range databases {
		sorted[i] = &databases[i]
	}
	slices.SortFunc(sorted, func(a, b *pgv1.Database) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	refused = map[string]string{}
	owner := map[string]string{}
	for _, db := range sorted {
		if !db.DeletionTimestamp.IsZero() && db.Spec.ReclaimPolicy != pgv1.ReclaimDelete {
			continue
		}
		if first, taken := owner[db.Spec.Name]; taken {
			refused[db.Name] = fmt.Sprintf("database %s is declared by the older Database %s", db.Spec.Name, first)
			continue
		}
		owner[db.Spec.Name] = db.Name
		declared = append(declared, db)
	}
	return declared, refused
}
