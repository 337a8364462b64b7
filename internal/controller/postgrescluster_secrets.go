package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// ensureSecrets creates each missing credential Secret once, with a password from crypto/rand.
// Existing Secrets are never rewritten, only checked: they are the truth for the roles'
// passwords, which the agents apply when a Secret changes. A user-supplied application Secret
// is read from the API server. Each Secret's resourceVersion is noted, to notice rotations.
func (r *PostgresClusterReconciler) ensureSecrets(ctx context.Context, s *scope) (*stop, error) {
	c := s.cluster
	s.credentialsVersions = map[string]string{}
	for _, cred := range pgbuilder.GeneratedCredentials(c) {
		existing := &corev1.Secret{}
		err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: cred.SecretName}, existing)
		if err == nil {
			if st := checkCredentialKeys(existing, "Secret"); st != nil {
				return st, nil
			}
			s.credentialsVersions[cred.SecretName] = existing.ResourceVersion
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get secret %s: %w", cred.SecretName, err)
		}
		secret := pgbuilder.BuildCredentialSecret(c, cred, rand.Text())
		if cred.SecretName == pgbuilder.AppSecretName(c) && len(s.caCert) > 0 {
			// Born with its connection keys: ensureAppConnection then has nothing to write.
			secret.Data = pgbuilder.AppConnection(c, cred.Username, secret.StringData[corev1.BasicAuthPasswordKey], s.caCert)
		}
		// Create, not apply: if the cache was merely stale, AlreadyExists keeps the old password.
		switch err := r.Create(ctx, secret, client.FieldOwner(pgbuilder.FieldOwner)); {
		case apierrors.IsAlreadyExists(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("create secret %s: %w", cred.SecretName, err)
		}
		recordWrite("Secret", "created")
		s.created = append(s.created, "Secret "+cred.SecretName)
		s.credentialsVersions[cred.SecretName] = secret.ResourceVersion
	}
	if pgbuilder.UsesUserAppSecret(c) {
		return r.checkUserSecret(ctx, s)
	}
	return nil, nil
}

// checkUserSecret verifies the application Secret the user supplied. It is not labelled for
// pgpilot, so it is outside the cache and read from the API server directly.
func (r *PostgresClusterReconciler) checkUserSecret(ctx context.Context, s *scope) (*stop, error) {
	name := pgbuilder.AppSecretName(s.cluster)
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: name}, secret)
	if apierrors.IsNotFound(err) {
		return invalidUntilFixed("AppSecretNotFound", fmt.Sprintf("spec.bootstrap.initdb.secret: Secret %q does not exist", name)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	if st := checkCredentialKeys(secret, "spec.bootstrap.initdb.secret: Secret"); st != nil {
		st.reason = "AppSecretInvalid"
		return st, nil
	}
	if user := string(secret.Data[corev1.BasicAuthUsernameKey]); agentapi.ReservedRole(user) {
		return invalidUntilFixed("AppSecretInvalid", fmt.Sprintf(
			"spec.bootstrap.initdb.secret: Secret %q names %q, a role pgpilot manages or PostgreSQL reserves: the application's owner must be a role of its own",
			name, user)), nil
	}
	s.credentialsVersions[name] = secret.ResourceVersion
	return nil, nil
}

// checkCredentialKeys stops the cluster when a credentials Secret lacks a key the instances
// read: nothing is changed in the database until it is fixed.
func checkCredentialKeys(secret *corev1.Secret, what string) *stop {
	for _, key := range []string{corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey} {
		if len(secret.Data[key]) == 0 {
			return invalidUntilFixed("CredentialsInvalid", fmt.Sprintf("%s %q has no %q key, or it is empty", what, secret.Name, key))
		}
	}
	return nil
}

// ensureAppConnection keeps the connection keys of the generated application Secret (host,
// URIs that verify the server, the CA) in line with its login and the cluster's CA; a user's
// own Secret is left alone. Its username and password are never written.
func (r *PostgresClusterReconciler) ensureAppConnection(ctx context.Context, s *scope) (*stop, error) {
	c := s.cluster
	if pgbuilder.UsesUserAppSecret(c) || len(s.caCert) == 0 {
		return nil, nil
	}
	secret := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: pgbuilder.AppSecretName(c)}, secret); err != nil {
		return nil, client.IgnoreNotFound(err) // just created: the next reconcile sees it
	}
	want := pgbuilder.AppConnection(c, string(secret.Data[corev1.BasicAuthUsernameKey]),
		string(secret.Data[corev1.BasicAuthPasswordKey]), s.caCert)
	if !slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(k string) bool { return !bytes.Equal(secret.Data[k], want[k]) }) {
		return nil, nil
	}
	updated := secret.DeepCopy()
	maps.Copy(updated.Data, want)
	if err := r.Update(ctx, updated, client.FieldOwner(pgbuilder.FieldOwner)); err != nil {
		return nil, fmt.Errorf("update secret %s: %w", secret.Name, err)
	}
	recordWrite("Secret", "updated")
	s.updated = append(s.updated, "Secret "+secret.Name)
	return nil, nil
}
