package controller

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=create;patch

// AdmissionPolicies installs the API server's admission policies pgpilot's security rests on
// (pgbuilder.BuildSecretReferencesPolicy, BuildPrimaryLeasePolicy) when this replica starts
// leading, retrying with backoff until the API server takes them; each failure is counted and
// logged, and the reconcilers do not wait for it. Only at start: an idle operator writes nothing,
// and a policy is deleted only by whoever administers the cluster (a restart puts it back).
type AdmissionPolicies struct {
	Client client.Client
}

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
		if err := a.Client.Apply(ctx, policy, client.FieldOwner(pgbuilder.FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply ValidatingAdmissionPolicy %s: %w", *policy.Name, err)
		}
		binding := pgbuilder.BuildAdmissionPolicyBinding(*policy.Name)
		if err := a.Client.Apply(ctx, binding, client.FieldOwner(pgbuilder.FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply ValidatingAdmissionPolicyBinding %s: %w", *binding.Name, err)
		}
	}
	return nil
}
