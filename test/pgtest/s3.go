package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// S3Server is a real S3 server (VersityGW, built by hack/toolchain.sh versitygw) on loopback,
// over TLS with a certificate of a throwaway CA, with one bucket.
type S3Server struct {
	// Endpoint is localhost: pgBackRest 2.45 matches host names only, not IP addresses, in certificates.
	Endpoint string
	Port     int
	Bucket   string
	Region   string
	// CAFile verifies the server's certificate.
	CAFile                       string
	AccessKeyID, SecretAccessKey string

	cmd     *exec.Cmd
	dataDir string
	args    []string
}

// StartS3 starts the server; PGPILOT_VERSITYGW names its binary (make test sets it).
func StartS3(t TB) *S3Server {
	t.Helper()
	binary := os.Getenv("PGPILOT_VERSITYGW")
	if binary == "" {
		t.Fatal("PGPILOT_VERSITYGW is not set: run through make test, or set it to $(hack/toolchain.sh versitygw)/versitygw")
	}
	dir, err := os.MkdirTemp("", "pgpilot-s3-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // pgBackRest runs as PostgreSQL's user and reads the CA
		t.Fatal(err)
	}
	s := &S3Server{Endpoint: "localhost", Port: FreePort(t), Bucket: "backups", Region: "us-east-1",
		AccessKeyID: "pgpilot-test", SecretAccessKey: "pgpilot-test-secret", dataDir: filepath.Join(dir, "data")}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	s.CAFile = filepath.Join(dir, "ca.crt")
	if err := writeTestPKI(s.CAFile, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	// The posix backend keeps a bucket as a folder and its metadata in a sidecar folder (no
	// extended attributes needed from the file system).
	for _, d := range []string{filepath.Join(s.dataDir, s.Bucket), filepath.Join(dir, "meta")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.args = []string{binary, "--port", "127.0.0.1:" + strconv.Itoa(s.Port), "--access", s.AccessKeyID, "--secret", s.SecretAccessKey,
		"--region", s.Region, "--cert", certFile, "--key", keyFile, "--iam-dir", filepath.Join(dir, "iam"),
		"posix", "--sidecar", filepath.Join(dir, "meta"), s.dataDir}
	if err := os.MkdirAll(filepath.Join(dir, "iam"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	t.Cleanup(func() { s.Stop() })
	return s
}

// Start runs the server (again, after Stop) and waits until it accepts TLS connections.
func (s *S3Server) Start(t TB) {
	t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = logWriter{t, "s3"}, logWriter{t, "s3"}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start the S3 server: %v", err)
	}
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(s.CAFile)
	pool.AppendCertsFromPEM(ca)
	Eventually(t, "the S3 server accepts TLS connections", func() error {
		conn, err := tls.Dial("tcp", net.JoinHostPort(s.Endpoint, strconv.Itoa(s.Port)), &tls.Config{RootCAs: pool})
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// Stop kills the server: the repository becomes unreachable, as when an S3 service is down.
func (s *S3Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// ObjectKeys lists the keys under prefix in the bucket, read from the server's storage.
func (s *S3Server) ObjectKeys(t TB, prefix string) []string {
	t.Helper()
	root := filepath.Join(s.dataDir, s.Bucket)
	var keys []string
	err := filepath.WalkDir(filepath.Join(root, prefix), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		key, _ := filepath.Rel(root, path)
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	return keys
}

// writeTestPKI writes a CA and a server certificate for 127.0.0.1 and localhost it signed.
func writeTestPKI(caFile, certFile, keyFile string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgpilot test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: Loopback},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP(Loopback)},
		DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, template, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for file, block := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o644); err != nil {
			return err
		}
	}
	return nil
}
