package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// checkpointVersion is the checkpoint file's format version.
const checkpointVersion = 1

// checkpoint is the state of a replay on disk: enough to resume it. It is
// written atomically (a temporary file renamed over the old one), so a
// crash leaves the previous or the new checkpoint, never a torn one.
type checkpoint struct {
	Version     int    `json:"version"`
	ReplayID    string `json:"replay_id"`
	Mode        string `json:"mode"`
	Fingerprint string `json:"fingerprint"`
	// Plan holds, per partition, the range and the first offset not done.
	Plan      plan      `json:"plan"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Complete is set when every record of the plan is done.
	Complete bool `json:"complete"`
}

// errCheckpointMismatch is returned when resuming a checkpoint written by
// another replay (another mode, topic, selection or agent).
var errCheckpointMismatch = errors.New("checkpoint is for a different replay")

// writeCheckpoint writes cp to path atomically and durably.
func writeCheckpoint(path string, cp checkpoint) error {
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// readCheckpoint reads the checkpoint at path.
func readCheckpoint(path string) (checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return checkpoint{}, fmt.Errorf("read checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return checkpoint{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	if cp.Version != checkpointVersion {
		return checkpoint{}, fmt.Errorf("read checkpoint %s: version %d, want %d", path, cp.Version, checkpointVersion)
	}
	return cp, nil
}
