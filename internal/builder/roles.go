package builder

import (
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

// RolesSpecHash identifies spec.roles and the names they may not take.
func RolesSpecHash(c *pgv1.PostgresCluster) string {
	data, _ := json.Marshal(struct {
		Roles []pgv1.ManagedRoleSpec
		Owner string
	}{c.Spec.Roles, c.Spec.Bootstrap.InitDB.Owner})
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

// BuildRolesRequest is what the primary's agent is given for spec.roles, with the passwords of
// secrets (by name; a missing one is absent). problems says, by role, why its password is kept
// as the server has it. The fingerprint covers the declarations and the Secrets' versions, never
// a password.
func BuildRolesRequest(c *pgv1.PostgresCluster, secrets map[string]*corev1.Secret) (req agentapi.CatalogRequest, problems map[string]string) {
	problems = map[string]string{}
	req = agentapi.CatalogRequest{Roles: []agentapi.ManagedRole{}, Forbidden: []string{c.Spec.Bootstrap.InitDB.Owner}}
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
	req.Fingerprint = rolesFingerprint(req, versions)
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

func rolesFingerprint(req agentapi.CatalogRequest, secretVersions map[string]string) string {
	withoutPasswords := slices.Clone(req.Roles)
	for i := range withoutPasswords {
		withoutPasswords[i].Password = nil
	}
	data, _ := json.Marshal(struct {
		Roles     []agentapi.ManagedRole
		Forbidden []string
		Versions  map[string]string
	}{withoutPasswords, req.Forbidden, secretVersions})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}
