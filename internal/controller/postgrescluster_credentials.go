package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// CredentialsAnnotation on an instance pod names the credentials revision pgpilot last told it
// about. Changing a pod makes the kubelet refresh its volumes at once, so the agent sees a
// rotated Secret within seconds instead of at the kubelet's next periodic sync.
const CredentialsAnnotation = "postgres.pgpilot.io/credentials-revision"

// announceRotation notices credentials Secrets that changed since the status last recorded
// them (a user rotating a password, a deleted Secret re-created), says so in an Event, and
// touches the instance pods so that their agents apply the new passwords promptly; and the
// same for certificates renewed by this reconcile (their Event is the renewal's) and for TLS
// becoming required.
func (r *PostgresClusterReconciler) announceRotation(ctx context.Context, s *scope) (*stop, error) {
	recorded := s.original.Status.CredentialsVersions
	var changed []string
	for name, version := range s.credentialsVersions {
		if old, ok := recorded[name]; ok && old != version {
			changed = append(changed, name)
		}
	}
	if len(changed) > 0 || s.certificatesRenewed != "" || s.tlsNowRequired {
		versions := map[string]string{pgbuilder.TLSSecretName(s.cluster): s.certificatesRenewed}
		maps.Copy(versions, s.credentialsVersions)
		if s.tlsNowRequired {
			versions[agentapi.TLSPolicyFile] = "required"
		}
		revision := credentialsRevision(versions)
		for i := range s.observed.Pods {
			if err := r.annotatePod(ctx, &s.observed.Pods[i], revision); err != nil {
				return nil, err
			}
		}
	}
	if len(changed) > 0 {
		slices.Sort(changed)
		r.event(s.cluster, nil, corev1.EventTypeNormal, "CredentialsChanged", "Rotate",
			"Secrets %s changed; the instances apply the new passwords without a restart", strings.Join(changed, ", "))
	}
	s.credentialsAnnounced = true
	return nil, nil
}

func (r *PostgresClusterReconciler) annotatePod(ctx context.Context, pod *corev1.Pod, revision string) error {
	if pod.Annotations[CredentialsAnnotation] == revision {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[CredentialsAnnotation] = revision
	if err := client.IgnoreNotFound(r.Patch(ctx, pod, patch, client.FieldOwner(pgbuilder.FieldOwner))); err != nil {
		return fmt.Errorf("annotate pod %s: %w", pod.Name, err)
	}
	recordWrite("Pod", "annotated")
	return nil
}

// credentialsRevision names a set of Secret versions in a few characters.
func credentialsRevision(versions map[string]string) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(versions)) {
		fmt.Fprintf(h, "%s=%s\n", name, versions[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
