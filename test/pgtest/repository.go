package pgtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// Repository is s's bucket at path, as the operator describes it to the agents.
func (s *S3Server) Repository(path string) agentapi.Repository {
	return agentapi.Repository{Host: s.Endpoint, Port: s.Port, Bucket: s.Bucket, Path: path, Region: s.Region,
		URIStyle: "path", CA: true}
}

// WriteBackupConfig writes b where the operator's ConfigMap puts it for cfg's agent, and s's
// keys and CA as the kubelet projects them for each repository b names, readable by
// PostgreSQL's user, who runs pgBackRest.
func WriteBackupConfig(t TB, cfg agentapi.Config, b agentapi.BackupConfig, s *S3Server) {
	t.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ConfigDir, agentapi.BackupConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	cred := RunAs(t)
	for _, which := range []string{agentapi.OwnRepository, agentapi.RecoveryRepository} {
		files := agentapi.KeyFiles(which)
		for name, content := range map[string]string{files.AccessKeyID: s.AccessKeyID, files.SecretAccessKey: s.SecretAccessKey, files.CA: string(ca)} {
			path := filepath.Join(cfg.CredentialsDir, name)
			if err := os.WriteFile(path, []byte(content), 0o400); err != nil {
				t.Fatal(err)
			}
			if cred != nil {
				if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := os.Chmod(cfg.CredentialsDir, 0o711); err != nil {
		t.Fatal(err)
	}
}

// Environ is cfg as the pod's environment, the pod's own fields resolved: what PostgreSQL
// inherits in a pod, and so what the archive_command the agent serves finds.
func Environ(cfg agentapi.Config) []string {
	variables := cfg.Environment()
	env := make([]string, 0, len(variables))
	for _, v := range variables {
		value := v.Value
		switch v.FieldPath {
		case "metadata.name":
			value = cfg.PodName
		case "metadata.namespace":
			value = cfg.Namespace
		}
		env = append(env, v.Name+"="+value)
	}
	return env
}

// ArchiveThroughAgent makes inst archive its WAL the way the operator's postgresql.conf has it
// do in a pod, with agentBinary (a copy of a binary that runs agent.PgBackRestCommand) in
// place of the pod's agent.
func ArchiveThroughAgent(inst *postgres.Instance, cfg agentapi.Config, agentBinary string) {
	// pgBackRest logs in as PostgreSQL's OS user, which runs it; the agent, here, is root.
	inst.IdentMap += fmt.Sprintf("%s postgres %s\n", agentapi.LocalSuperuserMap, agentapi.Superuser)
	inst.Settings["archive_mode"] = "on"
	inst.Settings["archive_command"] = agentBinary + " pgbackrest archive-push %p"
	inst.Env = append(inst.Env, Environ(cfg)...)
}
