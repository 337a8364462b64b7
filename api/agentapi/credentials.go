package agentapi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Credentials are the secrets an agent needs; they are never logged.
type Credentials struct {
	SuperuserPassword   string
	ReplicationPassword string
	AppUser             string
	AppPassword         string
	// AgentToken is what the operator presents to the agent's /v1 API.
	AgentToken string
}

// SecretKeyRef is one key of a Secret in the pod's namespace.
type SecretKeyRef struct{ Name, Key string }

// CredentialRefs say which Secret key holds each credential.
type CredentialRefs struct {
	SuperuserPassword   SecretKeyRef
	ReplicationPassword SecretKeyRef
	AppUser             SecretKeyRef
	AppPassword         SecretKeyRef
	AgentToken          SecretKeyRef
}

// CredentialFile is one credential's file in Config.CredentialsDir and the Secret key it is
// projected from.
type CredentialFile struct {
	Path   string
	Secret SecretKeyRef
}

// credentialFiles pairs each file with its Credentials field; the builder's projection and
// ReadCredentials both walk it.
var credentialFiles = []struct {
	path  string
	field func(*Credentials) *string
	ref   func(*CredentialRefs) SecretKeyRef
}{
	{"superuser-password", func(c *Credentials) *string { return &c.SuperuserPassword },
		func(r *CredentialRefs) SecretKeyRef { return r.SuperuserPassword }},
	{"replication-password", func(c *Credentials) *string { return &c.ReplicationPassword },
		func(r *CredentialRefs) SecretKeyRef { return r.ReplicationPassword }},
	{"app-username", func(c *Credentials) *string { return &c.AppUser },
		func(r *CredentialRefs) SecretKeyRef { return r.AppUser }},
	{"app-password", func(c *Credentials) *string { return &c.AppPassword },
		func(r *CredentialRefs) SecretKeyRef { return r.AppPassword }},
	{"agent-token", func(c *Credentials) *string { return &c.AgentToken },
		func(r *CredentialRefs) SecretKeyRef { return r.AgentToken }},
}

// Files are the credential files to project into Config.CredentialsDir.
func (r CredentialRefs) Files() []CredentialFile {
	files := make([]CredentialFile, 0, len(credentialFiles))
	for _, f := range credentialFiles {
		files = append(files, CredentialFile{Path: f.path, Secret: f.ref(&r)})
	}
	return files
}

// ReadCredentials reads the credential files in dir. A missing or empty file is an error
// naming it (and never its content): the agent keeps what it has rather than set a role's
// password to nothing.
func ReadCredentials(dir string) (Credentials, error) {
	var c Credentials
	var problems []string
	for _, f := range credentialFiles {
		data, err := os.ReadFile(filepath.Join(dir, f.path))
		value := string(bytes.TrimRight(data, "\r\n"))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", f.path, errors.Unwrap(err)))
		case value == "":
			problems = append(problems, f.path+" is empty")
		default:
			*f.field(&c) = value
		}
	}
	if len(problems) > 0 {
		return Credentials{}, fmt.Errorf("credentials in %s: %s", dir, strings.Join(problems, "; "))
	}
	return c, nil
}

// WriteCredentials writes c as ReadCredentials reads it, for tests that run an agent outside a
// pod.
func WriteCredentials(dir string, c Credentials) error {
	for _, f := range credentialFiles {
		// Renamed into place, as the kubelet swaps its files: a reader never sees half a value.
		path := filepath.Join(dir, f.path)
		if err := os.WriteFile(path+".tmp", []byte(*f.field(&c)), 0o600); err != nil {
			return fmt.Errorf("write credentials: %w", err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return fmt.Errorf("write credentials: %w", err)
		}
	}
	return nil
}
