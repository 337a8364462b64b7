package postgres

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// The files PostgreSQL's logging collector writes in the log directory with log_filename
// "postgresql" and no rotation: its JSON log (jsonlog), and whatever reaches the collector
// that is not a log record (such as the output of archive_command).
const (
	logFileBase = "postgresql"
	jsonLogFile = logFileBase + ".json"
)

// CollectLogs makes PostgreSQL log as JSON (log_destination jsonlog, through its logging
// collector) into named pipes in dir that this process reads, so that nothing is written to
// the volume and nothing needs rotating: each JSON record goes to record, one line at a time,
// and anything else the collector gets goes to Output. Output before the collector starts
// (the postmaster's first lines) goes to Output as before. Call it once, before Start; it
// takes effect through the configuration file, so ConfigFile must be set. The pipes are held
// open for reading and writing, so a restarted server's collector finds its reader there.
func (i *Instance) CollectLogs(dir string, record func(line []byte)) error {
	if i.ConfigFile == "" {
		return errors.New("collect logs: the instance has no configuration file to set logging in")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("collect logs: %w", err)
	}
	if err := i.chown(dir); err != nil {
		return fmt.Errorf("collect logs: %w", err)
	}
	jsonPipe, err := i.openPipe(filepath.Join(dir, jsonLogFile))
	if err != nil {
		return err
	}
	otherPipe, err := i.openPipe(filepath.Join(dir, logFileBase))
	if err != nil {
		_ = jsonPipe.Close()
		return err
	}
	go readLines(jsonPipe, record)
	go readLines(otherPipe, func(line []byte) { _, _ = i.logOutput().Write(line) })

	settings := maps.Clone(i.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	maps.Copy(settings, logSettings(dir))
	i.Settings = settings
	return nil
}

func logSettings(dir string) map[string]string {
	return map[string]string{
		"logging_collector": "on",
		"log_destination":   "jsonlog",
		"log_directory":     dir,
		"log_filename":      logFileBase,
		"log_rotation_age":  "0",
		"log_rotation_size": "0",
	}
}

// LogSettings are the names of the settings CollectLogs makes the agent's: spec.postgresql may
// not set them.
func LogSettings() []string { return slices.Sorted(maps.Keys(logSettings(""))) }

// openPipe makes path a named pipe the server's user can write (replacing a file of another
// kind a former configuration left there) and opens it for reading. Opening it for writing too
// keeps it from ever reading end-of-file, when the collector stops with its server.
func (i *Instance) openPipe(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe == 0 {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("collect logs: %w", err)
		}
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("collect logs: mkfifo %s: %w", path, err)
	}
	if err := i.chown(path); err != nil {
		return nil, fmt.Errorf("collect logs: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("collect logs: %w", err)
	}
	return f, nil
}

// chown gives path to the server's user when the server runs as another one (tests as root).
func (i *Instance) chown(path string) error {
	if i.RunAs == nil {
		return nil
	}
	return os.Chown(path, int(i.RunAs.Uid), int(i.RunAs.Gid))
}

// readLines hands each line of r to handle, with its newline. Lines have no length limit: a
// record carries whole statements.
func readLines(r io.Reader, handle func([]byte)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			handle(line)
		}
		if err != nil {
			return
		}
	}
}
