package builder

import (
	"net"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Database roles whose credentials pgpilot keeps in Secrets.
const (
	// AgentUser names the operator in the agent Secret, whose password is the bearer token of
	// the instance agents' status API.
	AgentUser = "pgpilot-operator"
)

// Credential is one generated login: the Secret's name and the role it is for.
type Credential struct {
	SecretName string
	Username   string
}

// GeneratedCredentials lists the Secrets pgpilot creates for the cluster. The application
// owner's Secret is left out when the user supplies their own.
func GeneratedCredentials(c *pgv1.PostgresCluster) []Credential {
	creds := []Credential{
		{SecretName: SuperuserSecretName(c), Username: agentapi.Superuser},
		{SecretName: ReplicationSecretName(c), Username: agentapi.DefaultReplicationUser},
		{SecretName: AgentSecretName(c), Username: AgentUser},
	}
	if !UsesUserAppSecret(c) {
		creds = append(creds, Credential{SecretName: AppSecretName(c), Username: c.Spec.Bootstrap.InitDB.Owner})
	}
	return creds
}

// BuildCredentialSecret is the basic-auth Secret for cred with the given password.
// It is a typed object, not an apply configuration: credential Secrets are created once and
// never re-applied, so a stale cache can never make pgpilot replace a password.
func BuildCredentialSecret(c *pgv1.PostgresCluster, cred Credential, password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            cred.SecretName,
			Namespace:       c.Namespace,
			Labels:          CommonLabels(c),
			OwnerReferences: []metav1.OwnerReference{ControllerReference(c)},
		},
		Type: corev1.SecretTypeBasicAuth,
		StringData: map[string]string{
			corev1.BasicAuthUsernameKey: cred.Username,
			corev1.BasicAuthPasswordKey: password,
		},
	}
}

// Keys of the application Secret that say how to connect, beside its username and password.
const (
	AppHostKey     = "host"
	AppPortKey     = "port"
	AppDatabaseKey = "dbname"
	AppURIKey      = "uri"
	AppJDBCURIKey  = "jdbc-uri"
	AppCAKey       = agentapi.TLSCAFile
)

// AppConnection is what the generated application Secret says about connecting: the -rw
// Service's cluster name, which the server certificate covers, URIs that verify it
// (sslmode=verify-full; libpq reads the CA from sslrootcert or ~/.postgresql/root.crt), and the
// CA itself.
func AppConnection(c *pgv1.PostgresCluster, username, password string, ca []byte) map[string][]byte {
	host := serviceHost(c, ReadWriteServiceName(c))
	port := strconv.Itoa(agentapi.DefaultPostgresPort)
	db := c.Spec.Bootstrap.InitDB.Database
	uri := url.URL{Scheme: "postgresql", User: url.UserPassword(username, password), Host: net.JoinHostPort(host, port),
		Path: "/" + db, RawQuery: "sslmode=verify-full"}
	jdbc := url.Values{"user": {username}, "password": {password}, "sslmode": {"verify-full"}}
	return map[string][]byte{
		AppHostKey:     []byte(host),
		AppPortKey:     []byte(port),
		AppDatabaseKey: []byte(db),
		AppURIKey:      []byte(uri.String()),
		AppJDBCURIKey:  []byte("jdbc:postgresql://" + net.JoinHostPort(host, port) + "/" + url.PathEscape(db) + "?" + jdbc.Encode()),
		AppCAKey:       ca,
	}
}
