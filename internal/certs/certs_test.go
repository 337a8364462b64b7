package certs

import (
	"strings"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustAuthority(t *testing.T) Pair {
	t.Helper()
	ca, err := NewAuthority("test CA", epoch, 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t *testing.T, ca Pair, req Request) Pair {
	t.Helper()
	p, err := Issue(ca, req, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIssuedServerCertificateCoversItsNames(t *testing.T) {
	ca := mustAuthority(t)
	names := []string{"db-rw", "db-rw.ns.svc", "*.db-instances.ns.svc"}
	server := mustIssue(t, ca, Request{CommonName: "db-rw", DNSNames: names, Usage: Server, Validity: time.Hour})
	otherCA := mustAuthority(t)
	other := mustIssue(t, ca, Request{CommonName: "x", DNSNames: names, Usage: Server, Validity: time.Hour})
	client := mustIssue(t, ca, Request{CommonName: "streaming_replica", Usage: Client, Validity: time.Hour})
	tests := []struct {
		name    string
		pair    Pair
		ca      []byte
		check   []string
		at      time.Time
		wantErr string
	}{
		{name: "valid for its names and a pod under the wildcard", pair: server, ca: ca.CertPEM,
			check: []string{"db-rw", "db-rw.ns.svc", "db-0.db-instances.ns.svc"}, at: epoch},
		{name: "not for a name it lacks", pair: server, ca: ca.CertPEM, check: []string{"db-ro"}, at: epoch,
			wantErr: "do not cover db-ro"},
		{name: "the wildcard covers one label only", pair: server, ca: ca.CertPEM,
			check: []string{"a.db-0.db-instances.ns.svc"}, at: epoch, wantErr: "do not cover"},
		{name: "not with another CA", pair: server, ca: otherCA.CertPEM, check: names[:1], at: epoch,
			wantErr: "does not verify with the CA"},
		{name: "expired", pair: server, ca: ca.CertPEM, check: names[:1], at: epoch.Add(2 * time.Hour),
			wantErr: "does not verify with the CA"},
		{name: "a key of another certificate", pair: Pair{CertPEM: server.CertPEM, KeyPEM: other.KeyPEM}, ca: ca.CertPEM,
			at: epoch, wantErr: "private key does not match"},
		{name: "a client certificate is not a server's", pair: client, ca: ca.CertPEM, at: epoch,
			wantErr: "does not verify with the CA"},
		{name: "no key", pair: Pair{CertPEM: server.CertPEM}, ca: ca.CertPEM, at: epoch, wantErr: "not PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckServer(tt.pair, tt.ca, tt.check, tt.at)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckServer: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckServer: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestIssuedCertificateNeverOutlivesItsCA(t *testing.T) {
	ca, err := NewAuthority("short CA", epoch, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := mustIssue(t, ca, Request{CommonName: "x", Usage: Client, Validity: 24 * time.Hour})
	caCert, _ := ParseCertificate(ca.CertPEM)
	cert, _ := ParseCertificate(leaf.CertPEM)
	if cert.NotAfter.After(caCert.NotAfter) {
		t.Errorf("leaf valid until %s, after its CA (%s)", cert.NotAfter, caCert.NotAfter)
	}
	if _, err := Issue(leaf, Request{CommonName: "y", Usage: Client, Validity: time.Hour}, epoch); err == nil {
		t.Error("a leaf certificate issued another")
	}
}

func TestRenewAt(t *testing.T) {
	ca := mustAuthority(t)
	tests := []struct {
		name        string
		validity    time.Duration
		renewBefore time.Duration
		want        time.Duration // after issue
	}{
		{name: "renewBefore ahead of expiry", validity: 90 * 24 * time.Hour, renewBefore: 7 * 24 * time.Hour, want: 83 * 24 * time.Hour},
		{name: "a short life", validity: 3 * time.Minute, renewBefore: time.Minute, want: 2 * time.Minute},
		{name: "renewBefore longer than its life: two thirds", validity: time.Hour, renewBefore: 2 * time.Hour, want: 40 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair := mustIssue(t, ca, Request{CommonName: "x", Usage: Client, Validity: tt.validity})
			cert, err := ParseCertificate(pair.CertPEM)
			if err != nil {
				t.Fatal(err)
			}
			if got := RenewAt(cert, tt.renewBefore).Sub(epoch); got != tt.want {
				t.Errorf("RenewAt = issue + %s, want + %s", got, tt.want)
			}
		})
	}
}

func TestIssuedBy(t *testing.T) {
	current, next := mustAuthority(t), mustAuthority(t)
	leaf := mustIssue(t, current, Request{CommonName: "x", Usage: Client, Validity: time.Hour})
	if !IssuedBy(leaf.CertPEM, current.CertPEM) {
		t.Error("a certificate is not issued by the CA that issued it")
	}
	if IssuedBy(leaf.CertPEM, next.CertPEM) {
		t.Error("a certificate of one CA counts as issued by another")
	}
	if IssuedBy([]byte("not PEM"), current.CertPEM) || IssuedBy(leaf.CertPEM, nil) {
		t.Error("unreadable input counts as issued")
	}
}
