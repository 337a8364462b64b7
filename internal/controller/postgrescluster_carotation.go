package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
)

// A rotation of the cluster's CA never shows a party a certificate it does not trust: the
// certificates stage starts it (every party trusts the next CA beside the current one), and
// this lane's last stage moves it on, each time once every instance has loaded the TLS Secret
// as it is: the next CA issues everything again, the previous one still trusted; then the
// previous one is dropped. The state is the CA Secret's keys (pgbuilder.CARotationOf), so a
// restarted operator goes on where it was.

// reasonCARotation: the Progressing condition's reason while a rotation waits for instances.
const reasonCARotation = "CARotation"

// caRotationDue says why the CA is to be rotated now, "" when it is not: the cluster asks by an
// annotation value not yet answered, or the CA has less than CARotateBefore left (looked at
// when the operator's certificate is renewed, so that an idle reconcile parses nothing).
func caRotationDue(c *pgv1.PostgresCluster, ca *corev1.Secret, renewing bool, now time.Time) string {
	if pgbuilder.CARotationOf(ca) != pgbuilder.CARotationNone {
		return ""
	}
	if request := c.Annotations[pgv1.RotateCAAnnotation]; request != "" && request != ca.Annotations[pgbuilder.CARotatedForAnnotation] {
		return fmt.Sprintf("asked by %s=%s", pgv1.RotateCAAnnotation, request)
	}
	if !renewing {
		return ""
	}
	if cert, err := certs.ParseCertificate(ca.Data[agentapi.TLSCAFile]); err == nil && cert.NotAfter.Sub(now) < pgbuilder.CARotateBefore {
		return "the CA expires on " + cert.NotAfter.UTC().Format(time.DateOnly)
	}
	return ""
}

// startCARotation issues the next CA and adds it to what every party trusts; the current CA
// issues until every instance has loaded the bundle.
func (r *PostgresClusterReconciler) startCARotation(ctx context.Context, s *scope, ca *corev1.Secret, why string, now time.Time) (*corev1.Secret, *stop, error) {
	c := s.cluster
	next, err := certs.NewAuthority(caCommonName(c)+" "+now.UTC().Format("20060102T150405Z"), now, pgbuilder.CALifetime)
	if err != nil {
		return nil, nil, fmt.Errorf("issue the next CA: %w", err)
	}
	desired := ca.DeepCopy()
	desired.Data[pgbuilder.CANextCertKey], desired.Data[pgbuilder.CANextKeyKey] = next.CertPEM, next.KeyPEM
	if desired.Annotations == nil {
		desired.Annotations = map[string]string{}
	}
	desired.Annotations[pgbuilder.CARotatedForAnnotation] = c.Annotations[pgv1.RotateCAAnnotation]
	written, err := r.updateSecret(ctx, desired)
	if err != nil {
		return nil, nil, err
	}
	r.event(c, nil, corev1.EventTypeNormal, "CARotationStarted", "RotateCA",
		"rotating the cluster's CA (%s): %s", why, pgbuilder.CARotationTrusting)
	return written, nil, nil
}

// advanceCARotation moves a rotation on once every instance has loaded the certificates as they
// are now. An instance that has not holds the rotation (the Progressing condition names it),
// never the cluster: the certificates in use stay trusted throughout.
func (r *PostgresClusterReconciler) advanceCARotation(ctx context.Context, s *scope) (*stop, error) {
	ca := s.caSecret
	if ca == nil {
		return nil, nil
	}
	step := pgbuilder.CARotationOf(ca)
	if step == pgbuilder.CARotationNone {
		return nil, nil
	}
	if behind := instancesBehind(s); len(behind) > 0 {
		return waitFor(reasonCARotation, fmt.Sprintf("rotating the cluster's CA, %s: waiting for %s to load the certificates",
			step, strings.Join(behind, ", "))), nil
	}
	desired, err := nextCARotationStep(s.cluster, ca, r.now())
	if err != nil {
		return invalidUntilFixed(reasonCertificatesInvalid, fmt.Sprintf("Secret %q: %v", ca.Name, err)), nil
	}
	written, err := r.updateSecret(ctx, desired)
	if err != nil {
		return nil, err
	}
	s.caSecret = written
	if next := pgbuilder.CARotationOf(written); next != pgbuilder.CARotationNone {
		r.event(s.cluster, nil, corev1.EventTypeNormal, "CARotationReissuing", "RotateCA",
			"every instance trusts the new CA; %s", next)
		return waitFor(reasonCARotation, fmt.Sprintf("rotating the cluster's CA, %s", next)), nil
	}
	r.event(s.cluster, nil, corev1.EventTypeNormal, "CARotationCompleted", "RotateCA",
		"every instance uses certificates of the new CA; the old CA is no longer trusted")
	return nil, nil
}

// nextCARotationStep is the CA Secret ca one step further: the next CA signs (with a new
// operator's certificate from it) and the current one stays trusted as the previous; or the
// previous one is dropped.
func nextCARotationStep(c *pgv1.PostgresCluster, ca *corev1.Secret, now time.Time) (*corev1.Secret, error) {
	desired := ca.DeepCopy()
	if pgbuilder.CARotationOf(ca) == pgbuilder.CARotationReissuing {
		delete(desired.Data, pgbuilder.CAPreviousCertKey)
		return desired, nil
	}
	desired.Data[pgbuilder.CAPreviousCertKey] = ca.Data[agentapi.TLSCAFile]
	desired.Data[agentapi.TLSCAFile], desired.Data[pgbuilder.CAKeyKey] = ca.Data[pgbuilder.CANextCertKey], ca.Data[pgbuilder.CANextKeyKey]
	delete(desired.Data, pgbuilder.CANextCertKey)
	delete(desired.Data, pgbuilder.CANextKeyKey)
	reissued, err := withOperatorCertificate(c, desired, now)
	if err != nil {
		return nil, err
	}
	desired.Data, desired.Annotations = reissued.Data, reissued.Annotations
	return desired, nil
}

// instancesBehind are the instances whose agents have not reported loading the TLS Secret as it
// is now. A pod that has not started yet is not waited for: it starts with the Secret as it is.
// Only a rotation asks, so an idle reconcile hashes nothing.
func instancesBehind(s *scope) []string {
	loaded := agentapi.CertificatesDigest(s.tlsSecret.Data)
	var behind []string
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		if !agentclient.ServesTLS(pod) || pod.Status.Phase == corev1.PodPending {
			continue
		}
		if report := s.observed.Reports[pod.Name]; report == nil || report.CertificatesDigest != loaded {
			behind = append(behind, pod.Name)
		}
	}
	return behind
}
