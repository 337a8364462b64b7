package agentapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testCredentials = Credentials{SuperuserPassword: "su", ReplicationPassword: "rp", AppUser: "app",
	AppPassword: "ap", AgentToken: "tok"}

// The files the builder projects are the files ReadCredentials reads: each one, from the key
// the refs name, written as the kubelet would (the Secret's value, trailing newline or not).
func TestProjectedFilesReadBack(t *testing.T) {
	refs := CredentialRefs{
		SuperuserPassword:   SecretKeyRef{"db-superuser", "password"},
		ReplicationPassword: SecretKeyRef{"db-replication", "password"},
		AppUser:             SecretKeyRef{"db-app", "username"},
		AppPassword:         SecretKeyRef{"db-app", "password"},
		AgentToken:          SecretKeyRef{"db-agent", "password"},
	}
	secrets := map[SecretKeyRef]string{
		refs.SuperuserPassword: "su\n", refs.ReplicationPassword: "rp", refs.AppUser: "app",
		refs.AppPassword: "ap", refs.AgentToken: "tok",
	}
	dir := t.TempDir()
	paths := map[string]bool{}
	for _, f := range refs.Files() {
		if paths[f.Path] {
			t.Fatalf("%s projected twice", f.Path)
		}
		paths[f.Path] = true
		if err := os.WriteFile(filepath.Join(dir, f.Path), []byte(secrets[f.Secret]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadCredentials(dir)
	if err != nil || got != testCredentials {
		t.Errorf("read %+v, %v; want %+v", got, err, testCredentials)
	}
}

func TestReadCredentialsNamesMissingAndEmptyFilesOnly(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCredentials(dir, testCredentials); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCredentials(dir); err != nil || got != testCredentials {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if err := os.Remove(filepath.Join(dir, "app-password")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent-token"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadCredentials(dir)
	if err == nil || !strings.Contains(err.Error(), "app-password") || !strings.Contains(err.Error(), "agent-token is empty") {
		t.Errorf("error %v, want app-password missing and agent-token empty", err)
	}
	for _, secret := range []string{"su", "rp", "tok"} {
		if err != nil && strings.Contains(strings.ReplaceAll(err.Error(), dir, ""), "'"+secret+"'") {
			t.Errorf("error shows a credential: %v", err)
		}
	}
}
