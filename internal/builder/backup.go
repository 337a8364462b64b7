package builder

import (
	"cmp"
	"net"
	"path"
	"strconv"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// ArchiveCommand is archive_command: the agent runs pgBackRest with the repository's keys,
// which it reads from their files at each call (a rotated key works at once).
const ArchiveCommand = agentDir + "/agent pgbackrest archive-push %p"

// archiveParameters turn archiving on when the cluster has a repository. archive_mode needs a
// restart; archive_command is reloaded.
func archiveParameters(c *pgv1.PostgresCluster) [][2]string {
	if c.Spec.Backup == nil {
		return nil
	}
	return [][2]string{
		{"archive_mode", "on"},
		{"archive_command", quote(ArchiveCommand)},
	}
}

// RepositoryPath is the cluster's repository inside the bucket: <path>/<namespace>/<name>.
func RepositoryPath(r pgv1.BackupRepository, namespace, cluster string) string {
	return path.Join("/", cmp.Or(r.Path, "/pgpilot"), namespace, cluster)
}

// repository is r as the agent reads it, for the stanza of cluster in namespace.
func repository(r pgv1.BackupRepository, namespace, cluster string) agentapi.Repository {
	host, port := r.Endpoint, 0
	if h, p, err := net.SplitHostPort(r.Endpoint); err == nil {
		host = h
		port, _ = strconv.Atoi(p) // the CRD's pattern allows digits only
	}
	return agentapi.Repository{
		Host:     host,
		Port:     port,
		Bucket:   r.Bucket,
		Path:     RepositoryPath(r, namespace, cluster),
		Region:   cmp.Or(r.Region, "us-east-1"),
		URIStyle: cmp.Or(r.URIStyle, "host"),
		CA:       r.CASecret != nil,
	}
}

// BackupConfig is what the agents archive, back up and recover with; nil when the cluster
// has neither a repository nor a recovery source.
func BackupConfig(c *pgv1.PostgresCluster) *agentapi.BackupConfig {
	b, rec := c.Spec.Backup, c.Spec.Bootstrap.Recovery
	if b == nil && rec == nil {
		return nil
	}
	config := &agentapi.BackupConfig{Compression: "lz4", Parallel: 1}
	if b != nil {
		own := repository(b.Repository, c.Namespace, c.Name)
		config.Repository = &own
		config.Compression = cmp.Or(b.Compression, config.Compression)
		config.Parallel = int(max(b.Parallel, 1))
		if b.Retention != nil {
			config.RetentionFull = int(b.Retention.Full)
			config.RetentionFullType = cmp.Or(b.Retention.FullType, "count")
		}
	}
	if rec != nil {
		config.Recovery = &agentapi.Recovery{
			Repository: repository(rec.Repository, cmp.Or(rec.Namespace, c.Namespace), rec.ClusterName),
			Target:     recoveryTarget(rec.Target),
		}
	}
	return config
}

func recoveryTarget(t *pgv1.RecoveryTarget) agentapi.RecoveryTarget {
	if t == nil {
		return agentapi.RecoveryTarget{}
	}
	target := agentapi.RecoveryTarget{Exclusive: t.Exclusive != nil && *t.Exclusive}
	switch {
	case t.Time != "":
		target.Type, target.Value = agentapi.RecoveryTargetTime, t.Time
	case t.LSN != "":
		target.Type, target.Value = "lsn", t.LSN
	case t.XID != "":
		target.Type, target.Value = "xid", t.XID
	case t.Name != "":
		target.Type, target.Value = "name", t.Name
	case t.Immediate != nil && *t.Immediate:
		target.Type = "immediate"
	}
	return target
}

// repositoryKeyFiles are the projections of the repositories' Secrets into the credentials
// directory.
func repositoryKeyFiles(c *pgv1.PostgresCluster) []agentapi.CredentialFile {
	var files []agentapi.CredentialFile
	add := func(which string, r pgv1.BackupRepository) {
		names := agentapi.KeyFiles(which)
		secret := r.CredentialsSecret.Name
		files = append(files,
			agentapi.CredentialFile{Path: names.AccessKeyID, Secret: agentapi.SecretKeyRef{Name: secret, Key: pgv1.BackupAccessKeyIDKey}},
			agentapi.CredentialFile{Path: names.SecretAccessKey, Secret: agentapi.SecretKeyRef{Name: secret, Key: pgv1.BackupSecretAccessKeyKey}})
		if r.CASecret != nil {
			files = append(files, agentapi.CredentialFile{Path: names.CA, Secret: agentapi.SecretKeyRef{Name: r.CASecret.Name, Key: pgv1.BackupCAKey}})
		}
	}
	if c.Spec.Backup != nil {
		add(agentapi.OwnRepository, c.Spec.Backup.Repository)
	}
	if rec := c.Spec.Bootstrap.Recovery; rec != nil {
		add(agentapi.RecoveryRepository, rec.Repository)
	}
	return files
}
