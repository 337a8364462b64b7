package builder

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Two rules RBAC cannot express, enforced by the API server itself (ValidatingAdmissionPolicy:
// no webhook to run or to be down) and installed by the operator at start:
//
//   - A Secret a PostgresCluster names ends up in its database pods, where the database superuser
//     can read it. So naming one takes the right to read it: a user who may edit clusters but
//     not read Secrets cannot borrow the operator's access to them. Only references that change
//     are checked, so the operator's own writes and clusters made before the rule keep working.
//   - An instance's ServiceAccount may renew the primary Lease only while its own pod holds it,
//     and may give it up, but never hand it to another instance: the operator alone grants it.
//     The pod comes from the token's pod-name claim, which the database superuser, who can read
//     the token, cannot change.

// SecretReferencesPolicyName and PrimaryLeasePolicyName name the policies and their bindings.
const (
	SecretReferencesPolicyName = "pgpilot-secret-references"
	PrimaryLeasePolicyName     = "pgpilot-primary-lease"
	podNameClaim               = "authentication.kubernetes.io/pod-name"
)

// SecretReferencePaths are the CEL paths, from a PostgresCluster, of every Secret name its spec
// can hold (a test walks the CRD's schema for any it misses). customQueries is a list, below.
var SecretReferencePaths = []string{
	"spec.?bootstrap.?initdb.?secret.?name",
	"spec.?bootstrap.?recovery.?repository.?credentialsSecret.?name",
	"spec.?bootstrap.?recovery.?repository.?caSecret.?name",
	"spec.?backup.?repository.?credentialsSecret.?name",
	"spec.?backup.?repository.?caSecret.?name",
	"spec.?certificates.?serverTLSSecret",
	"spec.?certificates.?serverCASecret",
	"spec.?certificates.?clientCASecret",
}

// secretReferences is a CEL list of the Secret names root (object or oldObject) names.
func secretReferences(root string) string {
	fields := make([]string, 0, len(SecretReferencePaths))
	for _, path := range SecretReferencePaths {
		fields = append(fields, fmt.Sprintf("%s.%s.orValue('')", root, path))
	}
	return fmt.Sprintf("([%[1]s] + %[2]s.spec.?monitoring.?customQueries.orValue([]).filter(q, has(q.secret)).map(q, q.secret.name) + "+
		"%[2]s.spec.?roles.orValue([]).filter(r, has(r.passwordSecret)).map(r, r.passwordSecret.name)).filter(n, n != '')",
		strings.Join(fields, ", "), root)
}

// maxRolePasswordSecrets is the CRD's limit on spec.roles naming a passwordSecret: each is one
// authorizer check of the policy's budget.
const maxRolePasswordSecrets = pgv1.MaxRolePasswordSecrets

// maxCustomQueries is the CRD's limit on spec.monitoring.customQueries.
const maxCustomQueries = 8

// secretReferenceSlots are CEL expressions of each place a Secret's name can be in object, ”
// when empty, with the field each names for messages. One validation per place: an authorizer
// check costs 350,000 of the 1,000,000 one expression may spend (Kubernetes' CEL cost model),
// and the 24 places stay within the 10,000,000 a policy may.
func secretReferenceSlots() (expressions, fields []string) {
	for _, path := range SecretReferencePaths {
		expressions = append(expressions, fmt.Sprintf("object.%s.orValue('')", path))
		fields = append(fields, strings.ReplaceAll(path, "?", ""))
	}
	for i := range maxCustomQueries {
		queries := "object.spec.?monitoring.?customQueries.orValue([])"
		expressions = append(expressions, fmt.Sprintf("(size(%[1]s) > %[2]d && has(%[1]s[%[2]d].secret) ? %[1]s[%[2]d].secret.name : '')", queries, i))
		fields = append(fields, fmt.Sprintf("spec.monitoring.customQueries[].secret (%d)", i+1))
	}
	for i := range maxRolePasswordSecrets {
		roles := "object.spec.?roles.orValue([]).filter(r, has(r.passwordSecret))"
		expressions = append(expressions, fmt.Sprintf("(size(%[1]s) > %[2]d ? %[1]s[%[2]d].passwordSecret.name : '')", roles, i))
		fields = append(fields, fmt.Sprintf("spec.roles[].passwordSecret (%d)", i+1))
	}
	return expressions, fields
}

// BuildSecretReferencesPolicy refuses a PostgresCluster that newly names a Secret its author may
// not get.
func BuildSecretReferencesPolicy() *admissionv1ac.ValidatingAdmissionPolicyApplyConfiguration {
	expressions, fields := secretReferenceSlots()
	validations := make([]*admissionv1ac.ValidationApplyConfiguration, 0, len(expressions))
	for i, name := range expressions {
		validations = append(validations, admissionv1ac.Validation().
			WithExpression(fmt.Sprintf("[%s].all(n, n == '' || n in variables.namedBefore || "+
				"authorizer.group('').resource('secrets').namespace(request.namespace).name(n).check('get').allowed())", name)).
			WithMessageExpression(fmt.Sprintf("'this PostgresCluster names a Secret you may not read: ' + %s + ' (%s). "+
				"pgpilot mounts the Secrets a cluster names into its database pods, so naming one requires get on it'", name, fields[i])).
			WithReason(metav1.StatusReasonForbidden))
	}
	return admissionv1ac.ValidatingAdmissionPolicy(SecretReferencesPolicyName).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue}).
		WithSpec(admissionv1ac.ValidatingAdmissionPolicySpec().
			WithFailurePolicy(admissionv1.Fail).
			WithMatchConstraints(admissionv1ac.MatchResources().WithResourceRules(
				admissionv1ac.NamedRuleWithOperations().
					WithAPIGroups(pgv1.GroupVersion.Group).WithAPIVersions("*").
					WithResources("postgresclusters").
					WithOperations(admissionv1.Create, admissionv1.Update))).
			WithVariables(admissionv1ac.Variable().WithName("namedBefore").
				WithExpression("oldObject == null ? [] : " + secretReferences("oldObject"))).
			WithValidations(validations...))
}

// BuildPrimaryLeasePolicy limits what a cluster's instance ServiceAccount may change in its
// primary Lease: renew it or give it up, from the pod that holds it, nothing else.
func BuildPrimaryLeasePolicy() *admissionv1ac.ValidatingAdmissionPolicyApplyConfiguration {
	cluster := fmt.Sprintf("oldObject.metadata.labels[%q]", ClusterLabel)
	unchanged := func(field string) string {
		return fmt.Sprintf("object.%[1]s == oldObject.%[1]s", field)
	}
	return admissionv1ac.ValidatingAdmissionPolicy(PrimaryLeasePolicyName).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue}).
		WithSpec(admissionv1ac.ValidatingAdmissionPolicySpec().
			WithFailurePolicy(admissionv1.Fail).
			WithMatchConstraints(admissionv1ac.MatchResources().
				WithResourceRules(admissionv1ac.NamedRuleWithOperations().
					WithAPIGroups("coordination.k8s.io").WithAPIVersions("*").WithResources("leases").
					WithOperations(admissionv1.Update)).
				WithObjectSelector(metav1ac.LabelSelector().
					WithMatchLabels(map[string]string{ManagedByLabel: ManagedByValue}).
					WithMatchExpressions(metav1ac.LabelSelectorRequirement().
						WithKey(ClusterLabel).WithOperator(metav1.LabelSelectorOpExists)))).
			WithMatchConditions(admissionv1ac.MatchCondition().WithName("cluster-instance-account").
				WithExpression(fmt.Sprintf("has(oldObject.metadata.labels) && %q in oldObject.metadata.labels && "+
					"request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':' + %s + '-instance'",
					ClusterLabel, cluster))).
			WithVariables(admissionv1ac.Variable().WithName("pod").WithExpression(fmt.Sprintf(
				"%[1]q in request.userInfo.extra && size(request.userInfo.extra[%[1]q]) == 1 ? request.userInfo.extra[%[1]q][0] : ''",
				podNameClaim))).
			WithValidations(
				admissionv1ac.Validation().
					WithExpression("variables.pod != ''").
					WithMessage("an instance changes its cluster's primary Lease only with its own pod's ServiceAccount token"),
				admissionv1ac.Validation().
					WithExpression("oldObject.spec.?holderIdentity.orValue('') == variables.pod").
					WithMessageExpression("'instance ' + variables.pod + ' does not hold the primary Lease: only the pgpilot operator grants it'").
					WithReason(metav1.StatusReasonForbidden),
				admissionv1ac.Validation().
					WithExpression("object.spec.?holderIdentity.orValue('') in [variables.pod, '']").
					WithMessage("an instance may renew the primary Lease or give it up, not hand it to another").
					WithReason(metav1.StatusReasonForbidden),
				admissionv1ac.Validation().
					WithExpression(strings.Join([]string{
						unchanged("spec.?leaseTransitions"), unchanged("spec.?acquireTime"),
						unchanged("spec.?leaseDurationSeconds"), unchanged("metadata.?labels"),
						unchanged("metadata.?annotations"), unchanged("metadata.?ownerReferences"),
					}, " && ")).
					WithMessage("an instance may change only the primary Lease's holder and renewal time").
					WithReason(metav1.StatusReasonForbidden)))
}

// BuildAdmissionPolicyBinding enforces the named policy everywhere.
func BuildAdmissionPolicyBinding(policy string) *admissionv1ac.ValidatingAdmissionPolicyBindingApplyConfiguration {
	return admissionv1ac.ValidatingAdmissionPolicyBinding(policy).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue}).
		WithSpec(admissionv1ac.ValidatingAdmissionPolicyBindingSpec().
			WithPolicyName(policy).
			WithValidationActions(admissionv1.Deny))
}
