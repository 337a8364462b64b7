package agentapi

import (
	"reflect"
	"strings"
	"testing"
)

func fullConfig() Config {
	return Config{
		PodName: "db-1", Namespace: "shop", ClusterName: "db", InitialPrimary: "db-0", PrimaryHost: "db-rw",
		DataDir: "/var/lib/postgresql/data/pgdata", ConfigDir: "/etc/pgpilot", SocketDir: "/var/run/postgresql",
		PostgresPort: 5433, AgentPort: 8001, AppDatabase: "app", ReplicationUser: "repl", BinDir: "/usr/lib/postgresql/15/bin",
		CredentialsDir: "/pgpilot/credentials",
	}
}

// resolve plays the kubelet: literal values and the pod's name and namespace ("shop").
func resolve(t *testing.T, env []EnvVar, pod string) func(string) (string, bool) {
	t.Helper()
	values := map[string]string{}
	for _, e := range env {
		if _, dup := values[e.Name]; dup {
			t.Fatalf("%s written twice", e.Name)
		}
		switch {
		case e.FieldPath == "metadata.name":
			values[e.Name] = pod
		case e.FieldPath == "metadata.namespace":
			values[e.Name] = "shop"
		case e.FieldPath != "":
			t.Fatalf("%s: unexpected field path %s", e.Name, e.FieldPath)
		default:
			values[e.Name] = e.Value
		}
	}
	return func(name string) (string, bool) { v, ok := values[name]; return v, ok }
}

func TestEnvironmentRoundTrip(t *testing.T) {
	defaults := fullConfig()
	defaults.PostgresPort, defaults.AgentPort, defaults.ReplicationUser, defaults.BinDir = 0, 0, "", ""
	for name, written := range map[string]Config{"every setting": fullConfig(), "defaults": defaults} {
		t.Run(name, func(t *testing.T) {
			read, err := FromEnvironment(resolve(t, written.Environment(), written.PodName))
			if err != nil {
				t.Fatal(err)
			}
			if want := written.WithDefaults(); !reflect.DeepEqual(read, want) {
				t.Errorf("read back\n%+v\nwant\n%+v", read, want)
			}
		})
	}
}

// Defaults stay out of the pod template, so an unused setting never changes it.
func TestEnvironmentOmitsDefaults(t *testing.T) {
	c := fullConfig()
	c.PostgresPort, c.AgentPort, c.ReplicationUser, c.BinDir = DefaultPostgresPort, DefaultAgentPort, DefaultReplicationUser, ""
	for _, e := range c.Environment() {
		switch e.Name {
		case "PGPILOT_PORT", "PGPILOT_AGENT_PORT", "PGPILOT_REPLICATION_USER", "PGPILOT_PG_BINDIR":
			t.Errorf("%s written although it is the default", e.Name)
		}
	}
}

func TestFromEnvironmentNamesWhatIsMissingOrInvalid(t *testing.T) {
	c := fullConfig()
	env := resolve(t, c.Environment(), c.PodName)
	_, err := FromEnvironment(func(name string) (string, bool) {
		switch name {
		case "PGDATA", "PGPILOT_CREDENTIALS_DIR":
			return "", false
		case "PGPILOT_PORT":
			return "fivefourthreetwo", true
		}
		return env(name)
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"PGDATA", "PGPILOT_CREDENTIALS_DIR", "PGPILOT_PORT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
