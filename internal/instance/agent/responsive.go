package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// A frozen primary (every PostgreSQL process stopped by a hung disk or a stuck kernel while the
// agent and the pod live on) answers no query, yet its agent renews the Lease and the operator
// would never fail it over. The agent notices: PostgreSQL has not answered its local query for
// agentapi.UnresponsiveAfter. From then on its status says so at once (Status.Unresponsive),
// without asking PostgreSQL again, and the operator decides (spec.failoverDelay) and orders the
// fence, which kills every process of the server (postgres.Instance.Kill).

// responsiveness is when PostgreSQL last stopped answering the agent's local queries.
type responsiveness struct {
	mu sync.Mutex
	// silentSince is the start of the first query that timed out since the last answer; zero
	// while PostgreSQL answers.
	silentSince time.Time
	lastErr     string
}

// answered: PostgreSQL answered, or refused with an error of its own (it runs).
func (r *responsiveness) answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.silentSince, r.lastErr = time.Time{}, ""
}

// noted records the outcome of a local query that started at started.
func (r *responsiveness) noted(started time.Time, err error) {
	if err == nil || !timedOut(err) {
		r.answered()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.silentSince.IsZero() {
		r.silentSince = started
	}
	r.lastErr = err.Error()
}

// unresponsive says why PostgreSQL counts as not answering at now; "" when it does not.
func (r *responsiveness) unresponsive(now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.silentSince.IsZero() || now.Sub(r.silentSince) < agentapi.UnresponsiveAfter {
		return ""
	}
	return fmt.Sprintf("PostgreSQL has not answered the agent's local queries for %s (%s)",
		now.Sub(r.silentSince).Round(time.Second), r.lastErr)
}

// timedOut: the server did not answer in time, as opposed to answering with an error (too many
// connections, starting up), which proves it runs.
func timedOut(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	var timeout interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &timeout) && timeout.Timeout())
}

// unresponsiveStatus is the status of a primary whose PostgreSQL does not answer, nil when it
// answers: given without a query, which would hang.
func (a *Agent) unresponsiveStatus() *agentapi.Status {
	why := a.responsive.unresponsive(time.Now())
	if why == "" {
		return nil
	}
	return &agentapi.Status{Role: agentapi.RolePrimary, Unresponsive: why,
		LeaseTransitions: a.keeper().Current().Transitions, Rejoined: a.lastRejoin(), LogNotices: a.logNotices()}
}
