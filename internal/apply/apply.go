// Package apply writes owned objects with server-side apply under pgpilot's single field
// manager, and only when the cached object differs from the desired one: an idle cluster costs
// the API server no writes.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pgpilot/pgpilot-operator/internal/jsonsubset"
)

// HashAnnotation records a hash of the configuration pgpilot last applied. Removing a field
// from the desired object changes the hash, which the subset comparison alone cannot see.
const HashAnnotation = "postgres.pgpilot.io/applied-hash"

// Outcome says what Ensure did.
type Outcome string

const (
	Unchanged Outcome = "unchanged"
	Created   Outcome = "created"
	Updated   Outcome = "updated"
)

// Config is a typed apply configuration from k8s.io/client-go/applyconfigurations.
type Config[A any] interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetNamespace() *string
	GetKind() *string
	WithAnnotations(map[string]string) A
}

// Ensure makes the object named by desired match it. live is an empty object of the same kind,
// filled from the (cached) reader; the write goes to the API server with force, as pgpilot is
// the only manager of these fields.
func Ensure[A Config[A]](ctx context.Context, c client.Client, fieldOwner string, desired A, live client.Object) (Outcome, error) {
	hash, err := Hash(desired)
	if err != nil {
		return Unchanged, err
	}
	key := client.ObjectKey{Namespace: deref(desired.GetNamespace()), Name: deref(desired.GetName())}
	outcome := Updated
	switch err := c.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
		outcome = Created
	case err != nil:
		return Unchanged, fmt.Errorf("get %s %s: %w", deref(desired.GetKind()), key, err)
	default:
		diff, err := Difference(desired, live, hash)
		if err != nil || diff == "" {
			return Unchanged, err
		}
		logf.FromContext(ctx).V(1).Info("owned object differs", "kind", deref(desired.GetKind()), "name", key.Name, "difference", diff)
	}
	desired.WithAnnotations(map[string]string{HashAnnotation: hash})
	if err := c.Apply(ctx, desired, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return Unchanged, fmt.Errorf("apply %s %s: %w", deref(desired.GetKind()), key, err)
	}
	return outcome, nil
}

// Hash fingerprints an apply configuration.
func Hash(desired any) (string, error) {
	data, err := json.Marshal(desired)
	if err != nil {
		return "", fmt.Errorf("hash desired object: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12]), nil
}

// UpToDate reports whether live still carries everything desired sets — fields someone else
// changed or took over show up as differences — and was last applied from the same desired
// configuration (hash).
func UpToDate(desired any, live client.Object, hash string) (bool, error) {
	diff, err := Difference(desired, live, hash)
	return diff == "", err
}

// Difference is why live is not up to date with desired, or "" when it is.
func Difference(desired any, live client.Object, hash string) (string, error) {
	if got := live.GetAnnotations()[HashAnnotation]; got != hash {
		return fmt.Sprintf("applied hash %q != %q", got, hash), nil
	}
	d, err := jsonsubset.Normalize(desired)
	if err != nil {
		return "", fmt.Errorf("desired %s: %w", live.GetName(), err)
	}
	// Objects read from the cache may carry no type information; the kind is known anyway.
	if m, ok := d.(map[string]any); ok {
		delete(m, "kind")
		delete(m, "apiVersion")
	}
	l, err := jsonsubset.Normalize(live)
	if err != nil {
		return "", fmt.Errorf("live %s: %w", live.GetName(), err)
	}
	// Server-side defaults and other managers' fields in live are no reason to write.
	if diff, found := jsonsubset.First(d, l, ""); found {
		return diff.String(), nil
	}
	return "", nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
