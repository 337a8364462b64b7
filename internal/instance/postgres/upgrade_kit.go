package postgres

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// A follow kit lets the other instances join the upgraded primary without copying its data, as
// PostgreSQL's documentation does with rsync for standbys: after pg_upgrade --link the new
// cluster's relation files are the old cluster's, and a standby that replayed the same WAL holds
// the same relations (only hint bits may differ, which are hints). So the kit is every file of
// the new cluster that is not such a link, copied before its first start (the new catalogs, the
// control file, pg_xact, the first WAL segment: a few MiB a database), and the list of the
// linked ones with their sizes. A standby rebuilds by linking its own relation files at the
// same paths (relfilenodes and database OIDs are kept from PostgreSQL 15 on) and writing the
// kit's files; it then starts as a standby of the new primary at its first checkpoint.
//
// It holds only when the promoted instance changed no data between the old primary's last
// record (FromLSN, where its timeline began) and its own shutdown checkpoint (UntilLSN), which
// pg_waldump verifies, and when the standby replayed at least up to FromLSN and nothing past
// UntilLSN's record.

// FollowKitManifest describes a follow kit.
type FollowKitManifest struct {
	From, To int
	// FromLSN is where the upgraded instance's replay of the old primary ended; UntilLSN its
	// own shutdown checkpoint before pg_upgrade. Only WAL without data changes lies between.
	FromLSN, UntilLSN string
	Files             []KitFile
}

// KitFile is one entry of the new cluster, relative to its directory.
type KitFile struct {
	Path string
	Mode fs.FileMode
	Dir  bool `json:",omitempty"`
	// Linked: the standby links its own file at Path, which must be Size bytes long; otherwise
	// the kit holds the file's Size bytes.
	Linked bool `json:",omitempty"`
	Size   int64
}

// walSegmentName matches a WAL segment's file name.
var walSegmentName = regexp.MustCompile(`^[0-9A-F]{24}$`)

// kitManifestName is the manifest's name in the kit's directory and first in its tar stream.
const kitManifestName = "manifest.json"

// FollowKitDir is where an upgraded instance keeps its follow kit, beside the data directory.
func (u *MajorUpgrade) FollowKitDir() string {
	return filepath.Join(filepath.Dir(u.Old.DataDir), "pgpilot-follow-kit")
}

// metadataRecords are the WAL records that may lie between the old primary's last record and
// the promoted instance's shutdown: checkpoints, the end of recovery, hint-bit page images and
// the standby snapshots; anything else may have changed a relation.
var metadataRecords = map[string]bool{
	"XLOG/CHECKPOINT_SHUTDOWN": true, "XLOG/CHECKPOINT_ONLINE": true, "XLOG/END_OF_RECOVERY": true,
	"XLOG/FPI_FOR_HINT": true, "XLOG/NEXTOID": true, "XLOG/PARAMETER_CHANGE": true, "XLOG/SWITCH": true,
	"XLOG/OVERWRITE_CONTRECORD": true, "Standby/RUNNING_XACTS": true,
}

// NoDataChangedSincePromotion verifies, on the old cluster stopped cleanly after its promotion,
// that no WAL record of its new timeline changed a relation. It returns where the timeline
// began, the end of the old primary's WAL as replayed here, and its shutdown checkpoint.
func (u *MajorUpgrade) NoDataChangedSincePromotion(ctx context.Context) (fromLSN, untilLSN string, err error) {
	control, err := u.Old.ControlData(ctx)
	if err != nil {
		return "", "", err
	}
	if control.State != "shut down" {
		return "", "", fmt.Errorf("the old cluster is %q, not shut down as a primary", control.State)
	}
	fromLSN, err = timelineStart(filepath.Join(u.Old.DataDir, "pg_wal"), control.Timeline)
	if err != nil {
		return "", "", err
	}
	from, ok1 := ha.ParseLSN(fromLSN)
	until, ok2 := ha.ParseLSN(control.CheckpointLSN)
	if !ok1 || !ok2 || until < from {
		return "", "", fmt.Errorf("WAL from %q to the shutdown checkpoint at %q: not a range", fromLSN, control.CheckpointLSN)
	}
	startSegment, err := walSegmentOf(control, from)
	if err != nil {
		return "", "", err
	}
	endSegment, err := walSegmentOf(control, until)
	if err != nil {
		return "", "", err
	}
	// The first and last segments named: without them pg_waldump learns the segment size from
	// any file in pg_wal, and a preallocated one, still zeros, fails it; with the first alone it
	// reads that one file, and a shutdown that switched WAL for the archive ends in the next.
	// The timeline's own segments hold its whole range: the one it began in was copied from the
	// previous timeline.
	out, err := u.Old.output(ctx, "pg_waldump", "--stats=record", "--path="+filepath.Join(u.Old.DataDir, "pg_wal"),
		"--timeline="+control.Timeline, "--start="+fromLSN, "--end="+ha.FormatLSN(readEnd(control, until)), startSegment, endSegment)
	if err != nil {
		return "", "", err
	}
	if changes := dataRecords(out); len(changes) > 0 {
		return "", "", fmt.Errorf("WAL records that may change relations after %s: %s", fromLSN, strings.Join(changes, ", "))
	}
	return fromLSN, control.CheckpointLSN, nil
}

// timelineStart is where timeline began: the switch point its history file lists last.
func timelineStart(walDir, timeline string) (string, error) {
	id, err := strconv.ParseUint(timeline, 10, 32)
	if err != nil || id < 2 {
		return "", fmt.Errorf("timeline %q: not one a promotion began", timeline)
	}
	history, err := os.ReadFile(filepath.Join(walDir, fmt.Sprintf("%08X.history", id)))
	if err != nil {
		return "", err
	}
	return lastSwitchPoint(history)
}

// lastSwitchPoint is the switch point of a timeline history file's last entry
// ("parent-timeline<TAB>switch-point<TAB>reason"; # starts a comment).
func lastSwitchPoint(history []byte) (string, error) {
	point := ""
	for _, line := range strings.Split(string(history), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && !strings.HasPrefix(fields[0], "#") {
			point = fields[1]
		}
	}
	if _, ok := ha.ParseLSN(point); !ok {
		return "", fmt.Errorf("timeline history: no switch point in %q", history)
	}
	return point, nil
}

// readEnd is where pg_waldump stops reading before the shutdown checkpoint at lsn. A checkpoint
// first on its WAL page (after a WAL switch, as an archiving primary's shutdown does) ends the
// range at the page's start: pg_waldump reads that page only up to its end location, then parses
// the record after the page header from bytes it never read ("incorrect prev-link").
func readEnd(control ControlData, lsn uint64) uint64 {
	const longPageHeaderBytes = 40 // no record starts inside a page header
	if block := control.WALBlockBytes; block > 0 && lsn%block <= longPageHeaderBytes {
		return lsn - lsn%block
	}
	return lsn
}

// walSegmentOf names the WAL segment of the checkpoint's timeline that holds lsn.
func walSegmentOf(control ControlData, lsn uint64) (string, error) {
	timeline, err := strconv.ParseUint(control.Timeline, 10, 32)
	size := control.WALSegmentBytes
	if err != nil || size == 0 || size&(size-1) != 0 {
		return "", fmt.Errorf("pg_controldata: timeline %q, WAL segments of %d bytes", control.Timeline, size)
	}
	segment, perID := lsn/size, uint64(1<<32)/size
	return fmt.Sprintf("%08X%08X%08X", timeline, segment/perID, segment%perID), nil
}

// dataRecords are the record types of pg_waldump --stats=record output outside metadataRecords.
func dataRecords(stats []byte) []string {
	var found []string
	scanner := bufio.NewScanner(bytes.NewReader(stats))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 2 || !strings.Contains(fields[0], "/") {
			continue
		}
		if n, err := strconv.Atoi(fields[1]); err == nil && n > 0 && !metadataRecords[fields[0]] {
			found = append(found, fields[0])
		}
	}
	return found
}

// MakeFollowKit writes the kit of the new cluster, swapped in place and never started, beside
// it: the copy of each file that is not a link to the previous cluster's.
func (u *MajorUpgrade) MakeFollowKit(ctx context.Context, from, to int, fromLSN, untilLSN string) (FollowKitManifest, error) {
	m := FollowKitManifest{From: from, To: to, FromLSN: fromLSN, UntilLSN: untilLSN}
	// Of the WAL only the segment the new cluster's recovery starts in: the others pg_wal
	// holds are recycled ones, which the new primary streams anew.
	control, err := u.newInstance(u.Old.DataDir).ControlData(ctx)
	if err != nil {
		return m, err
	}
	if control.RedoWALFile == "" {
		return m, errors.New("pg_controldata names no REDO WAL file")
	}
	kit := u.FollowKitDir()
	building := kit + ".tmp"
	if err := errors.Join(os.RemoveAll(kit), os.RemoveAll(building)); err != nil {
		return m, err
	}
	err = filepath.WalkDir(u.Old.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(u.Old.DataDir, path)
		if err != nil || rel == "." {
			return err
		}
		if dir, name := filepath.Split(rel); dir == "pg_wal/" && walSegmentName.MatchString(name) && name != control.RedoWALFile {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		entry := KitFile{Path: rel, Mode: info.Mode().Perm(), Dir: d.IsDir(), Size: info.Size()}
		switch {
		case d.IsDir():
			entry.Size = 0
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file or directory", rel)
		default:
			previous, err := os.Stat(filepath.Join(u.PreviousDataDir(), rel))
			entry.Linked = err == nil && os.SameFile(info, previous)
			if !entry.Linked {
				dst := filepath.Join(building, "files", rel)
				if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
					return err
				}
				if err := copyFile(path, dst, 0o600); err != nil {
					return err
				}
			}
		}
		m.Files = append(m.Files, entry)
		return nil
	})
	if err != nil {
		return m, fmt.Errorf("follow kit: %w", err)
	}
	if err := writeJSON(filepath.Join(building, kitManifestName), m); err != nil {
		return m, err
	}
	return m, os.Rename(building, kit)
}

// ReadFollowKit is the manifest of the kit in dir.
func ReadFollowKit(dir string) (FollowKitManifest, error) {
	var m FollowKitManifest
	data, err := os.ReadFile(filepath.Join(dir, kitManifestName))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

// Copied is the bytes the kit holds, Linked those a standby keeps.
func (m FollowKitManifest) Copied() (copied, linked int64) {
	for _, f := range m.Files {
		if f.Linked {
			linked += f.Size
		} else {
			copied += f.Size
		}
	}
	return copied, linked
}

// WriteFollowKit streams the kit in dir as tar: the manifest, then each copied file in its order.
func WriteFollowKit(w io.Writer, dir string) error {
	m, err := ReadFollowKit(dir)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := writeTarFile(tw, kitManifestName, filepath.Join(dir, kitManifestName)); err != nil {
		return err
	}
	for _, f := range m.Files {
		if f.Dir || f.Linked {
			continue
		}
		if err := writeTarFile(tw, f.Path, filepath.Join(dir, "files", f.Path)); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeTarFile(tw *tar.Writer, name, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = file.Close() }()
	info, err := file.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, file)
	return err
}

// writeJSON writes v to path and syncs it.
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = file.Write(data)
	return errors.Join(err, file.Sync(), file.Close())
}

// walPageSize bounds the shutdown checkpoint record a standby may have replayed past UntilLSN
// (its start): the record and a page header.
const walPageSize = 8192

// JoinByFollowKit rebuilds this stopped standby of the old major, which replayed up to
// replayLSN, as the new cluster the kit read from r describes: its own relation files linked,
// the kit's files written. The old directory is replaced only once the new one is whole; a
// failure leaves it as it was. It returns the bytes written and the bytes kept.
func (i *Instance) JoinByFollowKit(r io.Reader, replayLSN string) (copied, kept int64, err error) {
	tr := tar.NewReader(r)
	m, err := readKitManifest(tr)
	if err != nil {
		return 0, 0, err
	}
	if err := m.admits(replayLSN); err != nil {
		return 0, 0, err
	}
	next, replaced := i.DataDir+".kit", i.DataDir+".replaced"
	if err := errors.Join(os.RemoveAll(next), os.RemoveAll(replaced)); err != nil {
		return 0, 0, err
	}
	if err := i.mkdirOwned(next, 0o700); err != nil {
		return 0, 0, err
	}
	for _, f := range m.Files {
		n, err := i.joinEntry(tr, next, f)
		if err != nil {
			return 0, 0, errors.Join(fmt.Errorf("%s: %w", f.Path, err), os.RemoveAll(next))
		}
		if f.Linked {
			kept += n
		} else {
			copied += n
		}
	}
	if err := errors.Join(os.Rename(i.DataDir, replaced), os.Rename(next, i.DataDir)); err != nil {
		return 0, 0, err
	}
	return copied, kept, errors.Join(syncDir(filepath.Dir(i.DataDir)), os.RemoveAll(replaced))
}

func readKitManifest(tr *tar.Reader) (FollowKitManifest, error) {
	var m FollowKitManifest
	header, err := tr.Next()
	if err != nil {
		return m, fmt.Errorf("follow kit: %w", err)
	}
	if header.Name != kitManifestName {
		return m, fmt.Errorf("follow kit: %q first, want its manifest", header.Name)
	}
	if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&m); err != nil {
		return m, fmt.Errorf("follow kit manifest: %w", err)
	}
	return m, nil
}

// admits: a standby that replayed up to replayLSN holds the relations the kit's cluster links.
func (m FollowKitManifest) admits(replayLSN string) error {
	replay, ok1 := ha.ParseLSN(replayLSN)
	from, ok2 := ha.ParseLSN(m.FromLSN)
	until, ok3 := ha.ParseLSN(m.UntilLSN)
	switch {
	case !ok1 || !ok2 || !ok3:
		return fmt.Errorf("follow kit: positions %q, %q, %q", replayLSN, m.FromLSN, m.UntilLSN)
	case replay < from:
		return fmt.Errorf("follow kit: this standby replayed up to %s, short of the old primary's end at %s", replayLSN, m.FromLSN)
	case replay > until+walPageSize:
		return fmt.Errorf("follow kit: this standby replayed up to %s, past the upgraded instance's last checkpoint at %s", replayLSN, m.UntilLSN)
	}
	return nil
}

// joinEntry makes f in next: a directory, a link to this instance's own file (its size checked),
// or the kit's file from tr. It returns the file's bytes.
func (i *Instance) joinEntry(tr *tar.Reader, next string, f KitFile) (int64, error) {
	if strings.HasPrefix(filepath.Clean(f.Path), "..") || filepath.IsAbs(f.Path) {
		return 0, errors.New("a path outside the data directory")
	}
	path := filepath.Join(next, f.Path)
	switch {
	case f.Dir:
		return 0, i.mkdirOwned(path, f.Mode)
	case f.Linked:
		own := filepath.Join(i.DataDir, f.Path)
		info, err := os.Stat(own)
		switch {
		case errors.Is(err, fs.ErrNotExist) && mapFork(f.Path):
			return 0, nil // PostgreSQL makes it again
		case err != nil:
			return 0, fmt.Errorf("this standby lacks a relation file of the upgraded cluster: %w", err)
		case info.Size() != f.Size && !mapFork(f.Path):
			return 0, fmt.Errorf("%d bytes here, %d on the upgraded instance: not the same relation", info.Size(), f.Size)
		}
		return info.Size(), os.Link(own, path)
	}
	header, err := tr.Next()
	if err != nil {
		return 0, err
	}
	if header.Name != f.Path || header.Size != f.Size {
		return 0, fmt.Errorf("the kit holds %q (%d bytes) in its place", header.Name, header.Size)
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, f.Mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, tr)
	if err := errors.Join(err, out.Sync(), out.Close()); err != nil {
		return 0, err
	}
	return n, i.chown(path)
}

// mapFork: path is a free space map or visibility map fork (base/5/16393_vm, …_fsm.1). Their
// size differs between a primary and its standbys, as a primary extends them without WAL; the
// standby's own is what its replay made of the same WAL, and one it lacks is made again (a
// visibility map page missing has no page all-visible, which is never wrong).
func mapFork(path string) bool {
	name, _, _ := strings.Cut(filepath.Base(path), ".")
	return strings.HasSuffix(name, "_fsm") || strings.HasSuffix(name, "_vm")
}

func (i *Instance) mkdirOwned(path string, mode fs.FileMode) error {
	if err := os.Mkdir(path, mode); err != nil {
		return err
	}
	return i.chown(path)
}
