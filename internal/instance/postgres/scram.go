package postgres

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

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
	client, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		if client, err = scram.SHA256.NewClientUnprepped("", password, ""); err != nil {
			return "", fmt.Errorf("scram client: %w", err)
		}
	}
	creds, err := client.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: scramIterations})
	if err != nil {
		return "", fmt.Errorf("scram verifier: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(creds.StoredKey), b64(creds.ServerKey)), nil
}
