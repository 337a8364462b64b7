package controller

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create

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
