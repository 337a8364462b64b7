package postgres

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/xdg-go/scram"
)

// scramIterations is PostgreSQL's own (scram_iterations' default).
const scramIterations = 4096

// ScramVerifier is the SCRAM-SHA-256 verifier PostgreSQL stores for password (the form
// pg_authid.rolpassword holds), with a fresh salt: ALTER ROLE … PASSWORD takes it as it is, so
// the password itself is never in a statement the server could log. The password is prepared
// with SASLprep as PostgreSQL prepares it at login, and used as it is when SASLprep refuses it
// (PostgreSQL does the same).
func ScramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("scram salt: %w", err)
	}
	return scramVerifierWith(password, salt, scramIterations)
}

func scramVerifierWith(password string, salt []byte, iterations int) (string, error) {
	client, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		if client, err = scram.SHA256.NewClientUnprepped("", password, ""); err != nil {
			return "", fmt.Errorf("scram client: %w", err)
		}
	}
	creds, err := client.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return "", fmt.Errorf("scram verifier: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(creds.StoredKey), b64(creds.ServerKey)), nil
}

// ScramMatches says whether verifier, as pg_authid.rolpassword holds it, is password's: the
// password's keys made again with the verifier's own salt and iterations. Anything else (no
// password, an MD5 hash, a malformed verifier) does not match.
func ScramMatches(verifier, password string) bool {
	return knownMatches.matches(verifier, password, scramMatches)
}

func scramMatches(verifier, password string) bool {
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	factors, _, ok := strings.Cut(rest, "$")
	iterText, saltText, ok2 := strings.Cut(factors, ":")
	iterations, err := strconv.Atoi(iterText)
	salt, err2 := base64.StdEncoding.DecodeString(saltText)
	if !ok || !ok2 || err != nil || err2 != nil || iterations <= 0 {
		return false
	}
	again, err := scramVerifierWith(password, salt, iterations)
	return err == nil && subtle.ConstantTimeCompare([]byte(again), []byte(verifier)) == 1
}

// knownMatches remembers which passwords matched which verifiers: a pass over 200 roles whose
// passwords stand would otherwise derive 200 keys (4 096 HMAC rounds each, some 400 ms of CPU)
// to learn again what it learnt a minute before. A changed password or verifier is another key.
var knownMatches = &matchMemory{seen: map[[sha256.Size]byte]bool{}}

// maxKnownMatches bounds the memory; past it, it starts over.
const maxKnownMatches = 4096

type matchMemory struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]bool
}

func (m *matchMemory) matches(verifier, password string, derive func(string, string) bool) bool {
	key := sha256.Sum256([]byte(verifier + "\x00" + password))
	m.mu.Lock()
	match, known := m.seen[key]
	m.mu.Unlock()
	if known {
		return match
	}
	match = derive(verifier, password)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) >= maxKnownMatches {
		clear(m.seen)
	}
	m.seen[key] = match
	return match
}
