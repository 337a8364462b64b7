// Package backup holds pgpilot's backup reconcilers: Backup, which takes one backup on its
// cluster's primary and records what pgBackRest reported, and ScheduledBackup, which creates
// Backups on a cron schedule and keeps a bounded history. They reach the agents the way the
// cluster reconciler does (agentclient), with whose memory they share the TLS configurations.
package backup

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatus writes obj's status when it differs from original's, on condition that the
// object was not changed meanwhile (a conflict retries the reconcile), and calls announce with
// both then; an object deleted meanwhile is no error.
func patchStatus[T client.Object](ctx context.Context, c client.Client, original, obj T, status func(T) any, announce func(before, after T)) error {
	if equality.Semantic.DeepEqual(status(original), status(obj)) {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch %T status: %w", obj, client.IgnoreNotFound(err))
	}
	announce(original, obj)
	return nil
}
