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
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
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
	d, err := toJSONValue(desired)
	if err != nil {
		return "", err
	}
	// Objects read from the cache may carry no type information; the kind is known anyway.
	if m, ok := d.(map[string]any); ok {
		delete(m, "kind")
		delete(m, "apiVersion")
	}
	l, err := toJSONValue(live)
	if err != nil {
		return "", err
	}
	return FirstDifference(d, l), nil
}

// IsSubset reports whether every field set in want has the same value in have. Lists must have
// the same length and match element by element; server-side defaults in have are ignored.
func IsSubset(want, have any) bool {
	return FirstDifference(want, have) == ""
}

// FirstDifference is the path of the first field set in want that have lacks or holds with
// another value, or "" when want is a subset of have. It tells the log why pgpilot writes.
func FirstDifference(want, have any) string {
	return firstDifference(want, have, "")
}

func firstDifference(want, have any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return path + " (not an object)"
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			hv, ok := h[k]
			if !ok {
				return path + "." + k + " (missing)"
			}
			if d := firstDifference(w[k], hv, path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return path + " (length)"
		}
		for i := range w {
			if d := firstDifference(w[i], h[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	default:
		if want != have {
			return fmt.Sprintf("%s (%v != %v)", path, want, have)
		}
		return ""
	}
}

func toJSONValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(data, &out)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
