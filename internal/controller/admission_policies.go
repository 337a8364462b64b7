package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;create;patch

// AdmissionPolicies installs the API server's admission policies pgpilot's security rests on
// (pgbuilder.BuildSecretReferencesPolicy, BuildPrimaryLeasePolicy) when this replica starts
// leading, retrying with backoff until the API server takes them; each failure is counted and
// logged, and the reconcilers do not wait for it. Only at start: an idle operator writes nothing,
// and a policy is deleted only by whoever administers the cluster (a restart puts it back).
// A policy already as built (its applied-hash annotation matches) is left alone, so a restarted
// manager reads four objects and writes none.
type AdmissionPolicies struct {
	Client client.Client
	// Reader reads the policies directly: the label-scoped cache does not hold them, and an
	// informer for four objects read once would cost more than the reads.
	Reader client.Reader
}

// appliedHashAnnotation holds the hash of what pgpilot last applied to a policy or binding.
const appliedHashAnnotation = "postgres.pgpilot.io/applied-hash"

// NeedLeaderElection: one replica writes them.
func (a *AdmissionPolicies) NeedLeaderElection() bool { return true }

func (a *AdmissionPolicies) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("admission-policies")
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		if err := a.apply(ctx); err != nil {
			admissionPolicyFailures.Inc()
			log.Error(err, "cannot install the admission policies; Secret references and the primary Lease are guarded by RBAC alone meanwhile")
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		log.Info("admission policies installed", "policies", []string{pgbuilder.SecretReferencesPolicyName, pgbuilder.PrimaryLeasePolicyName})
	}
	return nil
}

func (a *AdmissionPolicies) apply(ctx context.Context) error {
	policies := []*admissionv1ac.ValidatingAdmissionPolicyApplyConfiguration{
		pgbuilder.BuildSecretReferencesPolicy(), pgbuilder.BuildPrimaryLeasePolicy(),
	}
	for _, policy := range policies {
		if err := applyChanged(ctx, a, policy, "ValidatingAdmissionPolicy", *policy.Name); err != nil {
			return err
		}
		binding := pgbuilder.BuildAdmissionPolicyBinding(*policy.Name)
		if err := applyChanged(ctx, a, binding, "ValidatingAdmissionPolicyBinding", *binding.Name); err != nil {
			return err
		}
	}
	return nil
}

// annotatable is an apply configuration that can carry annotations.
type annotatable[T any] interface {
	runtime.ApplyConfiguration
	WithAnnotations(map[string]string) T
}

// applyChanged applies desired unless the object on the server carries desired's hash already.
func applyChanged[T annotatable[T]](ctx context.Context, a *AdmissionPolicies, desired T, kind, name string) error {
	hash, err := appliedHash(desired)
	if err != nil {
		return fmt.Errorf("hash %s %s: %w", kind, name, err)
	}
	current := &metav1.PartialObjectMetadata{}
	current.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind(kind))
	switch err := a.Reader.Get(ctx, client.ObjectKey{Name: name}, current); {
	case err == nil && current.GetAnnotations()[appliedHashAnnotation] == hash:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	desired.WithAnnotations(map[string]string{appliedHashAnnotation: hash})
	if err := a.Client.Apply(ctx, desired, client.FieldOwner(pgbuilder.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", kind, name, err)
	}
	return nil
}

func appliedHash(desired runtime.ApplyConfiguration) (string, error) {
	data, err := json.Marshal(desired)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}
