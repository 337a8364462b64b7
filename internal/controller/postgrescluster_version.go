package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// DefaultPostgresMajor is the major of a new cluster that names none: the newest major on a
// Debian stable release (17 on trixie, with Debian's security support); 18 comes from Debian's
// testing suite.
const DefaultPostgresMajor int32 = 17

// legacyPostgresMajor is the major of every cluster created before spec.postgresVersion existed
// (pgpilot 0.1.0 to 0.3.0 ran PostgreSQL 15 only).
const legacyPostgresMajor int32 = 15

// SupportedPostgresMajors are the majors pgpilot ships images of (images/postgresql/majors).
var SupportedPostgresMajors = []int32{15, 17, 18}

// PostgresImageVariable is the operator's environment variable naming its image of major.
func PostgresImageVariable(major int32) string {
	return fmt.Sprintf("RELATED_IMAGE_POSTGRES_%d", major)
}

// resolveMajor is the major the cluster's data is in, or why the spec cannot run it. The data's
// major, once there is data, is what the status recorded, else what the StatefulSet was made for
// (it carries an annotation since the status may not have been written after creating it), else
// 15 for a StatefulSet of a release before 0.4.0. A higher spec.postgresVersion is a major
// upgrade (advanceMajorUpgrade); a lower one is refused by the API, but setting the field on a
// cluster that had none is not.
func resolveMajor(c *pgv1.PostgresCluster, live *appsv1.StatefulSet) (int32, *stop) {
	data := c.Status.PostgresMajor
	if data == 0 && live != nil {
		data = legacyPostgresMajor
		if major, err := strconv.ParseInt(live.Annotations[pgbuilder.PostgresMajorAnnotation], 10, 32); err == nil {
			data = int32(major)
		}
	}
	want := c.Spec.PostgresVersion
	switch {
	case want == 0 && data == 0:
		return DefaultPostgresMajor, nil
	case want == 0:
		return data, nil
	case data == 0 || data == want:
		return want, nil
	case want > data:
		return data, nil
	}
	return 0, invalid("PostgresVersionLowered", fmt.Sprintf(
		"spec.postgresVersion is %d but the cluster's data is PostgreSQL %d: a data directory cannot move to an older major; set spec.postgresVersion to %d or higher",
		want, data, data))
}

// instanceImages are the images of the instance pods when the data is of major data: the
// image of spec.postgresVersion, and during a major upgrade the data's major's image, whose
// server an init container carries in. The carried server stays in the template after the
// upgrade: removing it would roll every pod (a switchover) for nothing.
func (r *PostgresClusterReconciler) instanceImages(c *pgv1.PostgresCluster, data int32) (pgbuilder.Images, *stop) {
	images := pgbuilder.Images{Agent: r.AgentImage, PostgresMajor: data}
	run := data
	carried := int32(0)
	switch up := c.Status.MajorUpgrade; {
	case c.Spec.PostgresVersion > data:
		run, carried = c.Spec.PostgresVersion, data
	case up != nil && up.To == data && !up.BeforePointOfNoReturn():
		carried = up.From
	}
	image, st := r.postgresImage(c, run)
	if st != nil {
		return images, st
	}
	images.Postgres = image
	if carried != 0 {
		// The old major's image is pgpilot's: spec.image names the one major it runs.
		old := r.PostgresImages[carried]
		if old == "" {
			return images, invalid("NoImage", fmt.Sprintf(
				"the operator has no image of PostgreSQL %d (set its %s) to carry the old server from during the major upgrade",
				carried, PostgresImageVariable(carried)))
		}
		images.Carried = &pgbuilder.CarriedImage{Image: old, Major: carried}
	}
	return images, nil
}

// liveStatefulSet is the cluster's StatefulSet as the cache has it, nil when there is none.
func (r *PostgresClusterReconciler) liveStatefulSet(ctx context.Context, s *scope) (*appsv1.StatefulSet, error) {
	sts := &appsv1.StatefulSet{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.StatefulSetName(s.cluster)}, sts)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get statefulset: %w", err)
	}
	return sts, nil
}

// postgresImage is the image of the cluster's major: spec.image, else the operator's own.
func (r *PostgresClusterReconciler) postgresImage(c *pgv1.PostgresCluster, major int32) (string, *stop) {
	if c.Spec.Image != "" {
		return c.Spec.Image, nil
	}
	if image := r.PostgresImages[major]; image != "" {
		return image, nil
	}
	return "", invalid("NoImage", fmt.Sprintf(
		"spec.image is empty and the operator has no image of PostgreSQL %d (set its %s, or spec.image)",
		major, PostgresImageVariable(major)))
}

// versionSummary is what the agents say of the servers' versions.
type versionSummary struct {
	// major is the cluster's (resolveMajor); 0 when this reconcile stopped before knowing.
	major int32
	// running is the primary's server version, "" until its agent says.
	running string
	// mismatch names the instances whose server is of another major than spec.postgresVersion.
	mismatch *reasonMessage
	// collations lists the databases whose collation version changed, "" when none did.
	collations string
}

func summarizeVersions(s *scope, primary string) versionSummary {
	v := versionSummary{major: s.postgresMajor}
	if report := s.observed.Reports[primary]; report != nil {
		v.running = report.ServerVersion
	}
	var wrong, collations []string
	for _, name := range slices.Sorted(maps.Keys(s.observed.Reports)) {
		report := s.observed.Reports[name]
		if report == nil {
			continue
		}
		if v.major != 0 && report.ServerVersion != "" && majorOf(report.ServerVersion) != v.major {
			wrong = append(wrong, fmt.Sprintf("%s runs %s", name, report.ServerVersion))
		}
		for _, m := range report.CollationMismatches {
			collations = append(collations, fmt.Sprintf("%s: database %s (recorded %s, now %s)", name, m.Database, m.Recorded, m.Actual))
		}
	}
	// During a major upgrade instances of both majors run until every one is rebuilt.
	if len(wrong) > 0 && !s.majorUpgrade.Running() {
		v.mismatch = &reasonMessage{reason: "PostgresVersionMismatch", message: fmt.Sprintf(
			"the cluster is PostgreSQL %d but %s: spec.image must be an image of PostgreSQL %d",
			v.major, strings.Join(wrong, ", "), v.major)}
	}
	v.collations = strings.Join(collations, "; ")
	return v
}

// setMajorUpgrade records the major upgrade and its condition: True while it runs and once it
// completed, False when it is held or went back, absent before any.
func setMajorUpgrade(status *pgv1.PostgresClusterStatus, up *pgv1.MajorUpgradeStatus, generation int64) {
	status.MajorUpgrade = up
	if up == nil {
		meta.RemoveStatusCondition(&status.Conditions, pgv1.ConditionMajorUpgrade)
		return
	}
	c := metav1.Condition{Type: pgv1.ConditionMajorUpgrade, Status: metav1.ConditionTrue, Reason: string(up.Step),
		ObservedGeneration: generation,
		Message:            fmt.Sprintf("PostgreSQL %d to %d (%s): %s", up.From, up.To, up.Mode, strings.ToLower(string(up.Step)))}
	switch up.Step {
	case pgv1.MajorUpgradeCheckFailed:
		c.Status = metav1.ConditionFalse
		c.Message = fmt.Sprintf("PostgreSQL %d to %d is held by its checks: %s", up.From, up.To, strings.Join(up.Problems, "; "))
	case pgv1.MajorUpgradeReverted, pgv1.MajorUpgradeFailed:
		c.Status = metav1.ConditionFalse
	}
	if up.Message != "" && up.Step != pgv1.MajorUpgradeCheckFailed {
		c.Message += "; " + up.Message
	}
	c.Message = truncate(c.Message, 32768)
	meta.SetStatusCondition(&status.Conditions, c)
}

func majorOf(serverVersion string) int32 {
	major, _ := strconv.ParseInt(strings.SplitN(serverVersion, ".", 2)[0], 10, 32)
	return int32(major)
}

// setVersions records the data's major and the running version, and the collation condition.
func setVersions(status *pgv1.PostgresClusterStatus, v versionSummary, generation int64) {
	if v.major != 0 {
		status.PostgresMajor = v.major
	}
	if v.running != "" {
		status.PostgresVersion = v.running
	}
	c := metav1.Condition{Type: pgv1.ConditionCollationVersionMismatch, Status: metav1.ConditionFalse,
		Reason: "CollationVersionsMatch", Message: "every database's collation version is the library's", ObservedGeneration: generation}
	if v.collations != "" {
		c.Status, c.Reason = metav1.ConditionTrue, "CollationVersionChanged"
		c.Message = "the C library or ICU of the image sorts text differently from when these databases were created: " +
			v.collations + ". Rebuild the indexes that use the collation (REINDEX DATABASE), then run " +
			"ALTER DATABASE <name> REFRESH COLLATION VERSION"
	} else if meta.FindStatusCondition(status.Conditions, c.Type) == nil {
		return // never found: no condition to clear
	}
	meta.SetStatusCondition(&status.Conditions, c)
}
