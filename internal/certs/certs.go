// Package certs issues and checks the X.509 certificates of a cluster: its certificate
// authority, the servers' certificates and the clients' (replication, operator). Keys are
// ECDSA P-256: quick to generate at scale, and every PostgreSQL and Go TLS stack accepts them.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// backdate covers clocks a little behind the issuer's: a certificate is valid from a few
// minutes before it was issued.
const backdate = 5 * time.Minute

// Pair is a certificate and its private key, PEM-encoded as Secrets and PostgreSQL hold them.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Usage says what a certificate authenticates.
type Usage int

const (
	// Server certificates are presented by PostgreSQL and by the agents' API.
	Server Usage = iota
	// Client certificates authenticate a login (the replication user) or the operator.
	Client
)

// Request is a certificate to issue.
type Request struct {
	// CommonName is the subject; for a client, the role or identity it logs in as.
	CommonName string
	// DNSNames are the server names it is valid for.
	DNSNames []string
	Usage    Usage
	Validity time.Duration
}

// NewAuthority creates a self-signed certificate authority.
func NewAuthority(commonName string, now time.Time, validity time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate CA key: %w", err)
	}
	template, err := baseTemplate(commonName, now, validity)
	if err != nil {
		return Pair{}, err
	}
	template.IsCA = true
	template.BasicConstraintsValid = true
	template.MaxPathLenZero = true
	template.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return Pair{}, fmt.Errorf("create CA certificate: %w", err)
	}
	return encode(der, key)
}

// Issue signs a new key's certificate for req with the authority ca.
func Issue(ca Pair, req Request, now time.Time) (Pair, error) {
	caCert, caKey, err := ca.Parse()
	if err != nil {
		return Pair{}, fmt.Errorf("certificate authority: %w", err)
	}
	if !caCert.IsCA {
		return Pair{}, errors.New("certificate authority: the certificate is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate key: %w", err)
	}
	template, err := baseTemplate(req.CommonName, now, req.Validity)
	if err != nil {
		return Pair{}, err
	}
	template.KeyUsage = x509.KeyUsageDigitalSignature
	switch req.Usage {
	case Server:
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		template.DNSNames = req.DNSNames
	case Client:
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	// Never valid after its issuer: a chain is only as long-lived as its shortest link.
	template.NotAfter = minTime(template.NotAfter, caCert.NotAfter)
	der, err := x509.CreateCertificate(rand.Reader, template, caCert, key.Public(), caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("create certificate %s: %w", req.CommonName, err)
	}
	return encode(der, key)
}

func baseTemplate(commonName string, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"pgpilot"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validity),
	}, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encode key: %w", err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Parse reads the pair's first certificate and its key, and checks that they belong together.
func (p Pair) Parse() (*x509.Certificate, crypto.Signer, error) {
	cert, err := ParseCertificate(p.CertPEM)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(p.KeyPEM)
	if block == nil {
		return nil, nil, errors.New("the private key is not PEM")
	}
	key, err := parseKey(block)
	if err != nil {
		return nil, nil, err
	}
	public, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !public.Equal(cert.PublicKey) {
		return nil, nil, errors.New("the private key does not match the certificate")
	}
	return cert, key, nil
}

// parseKey accepts the encodings cert-manager, openssl and this package write.
func parseKey(block *pem.Block) (crypto.Signer, error) {
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("the private key cannot be read: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the private key of type %T cannot sign", key)
	}
	return signer, nil
}

// ParseCertificate reads the first certificate of a PEM bundle.
func ParseCertificate(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM certificate found")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the certificate cannot be read: %w", err)
		}
		return cert, nil
	}
}

// IssuedBy says whether the first certificate of leafPEM was signed by the first of caPEM:
// after a CA rotation, a certificate of the previous CA is issued again. The key identifiers
// answer without a signature check when both certificates carry them (every reconcile asks).
func IssuedBy(leafPEM, caPEM []byte) bool {
	leaf, err := ParseCertificate(leafPEM)
	if err != nil {
		return false
	}
	ca, err := ParseCertificate(caPEM)
	if err != nil {
		return false
	}
	if len(leaf.AuthorityKeyId) > 0 && len(ca.SubjectKeyId) > 0 {
		return bytes.Equal(leaf.AuthorityKeyId, ca.SubjectKeyId) && bytes.Equal(leaf.RawIssuer, ca.RawSubject)
	}
	return leaf.CheckSignatureFrom(ca) == nil
}

// Pool holds every certificate of a PEM bundle (a CA file may carry the old and the new CA).
func Pool(bundle []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, errors.New("no PEM certificate found in the CA bundle")
	}
	return pool, nil
}

// CheckServer verifies that a server pair is usable: the key matches, the certificate chains to
// one in caBundle, is valid at now and covers every name in names.
func CheckServer(p Pair, caBundle []byte, names []string, now time.Time) error {
	cert, _, err := p.Parse()
	if err != nil {
		return err
	}
	pool, err := Pool(caBundle)
	if err != nil {
		return err
	}
	intermediates := x509.NewCertPool()
	for rest := p.CertPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && !bytes.Equal(c.Raw, cert.Raw) {
			intermediates.AddCert(c)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the certificate does not verify with the CA: %w", err)
	}
	var uncovered []string
	for _, name := range names {
		if cert.VerifyHostname(name) != nil {
			uncovered = append(uncovered, name)
		}
	}
	if len(uncovered) > 0 {
		return fmt.Errorf("the certificate's names %v do not cover %s", cert.DNSNames, strings.Join(uncovered, ", "))
	}
	return nil
}

// RenewAt is when a certificate should be replaced: renewBefore ahead of its expiry, or two
// thirds into its life when renewBefore is not shorter than its life (it was issued for less
// than asked, capped by its CA's expiry).
func RenewAt(cert *x509.Certificate, renewBefore time.Duration) time.Time {
	issued := cert.NotBefore.Add(backdate)
	life := cert.NotAfter.Sub(issued)
	if renewBefore < life {
		return cert.NotAfter.Add(-renewBefore)
	}
	return issued.Add(life * 2 / 3)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
