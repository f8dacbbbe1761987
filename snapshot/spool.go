package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/tockhq/tock/shard"
)

const (
	// spoolMemory bounds the ids a spool buffers in memory, over all shards, before it
	// appends them to their files.
	spoolMemory = 8 << 20
	// spoolMinBuffer is the least a spool buffers per shard before it appends to the
	// shard's file, when there are so many shards that spoolMemory/shards is smaller.
	spoolMinBuffer = 4 << 10
	// readIDs is how many spooled ids an export reads jobs for at a time (one ReadJobs
	// pipeline).
	readIDs = 1000
)

// spool holds the job ids of each shard between Export's scan of the namespace and the
// writing of the shard files: a file per shard in a temporary directory of its own, each
// id preceded by its length as a uvarint. Ids are buffered per shard and appended to the
// shard's file (opened, written, closed) once the buffer is full, so memory and open
// files stay bounded whatever the job and shard counts. add and flush are for one
// goroutine; read and remove may be called concurrently for different shards once flush
// has returned.
type spool struct {
	dir   string
	bufs  [][]byte
	limit int // bytes buffered per shard before they are appended to its file
}

// newSpool makes a spool for n shards in a new directory under dir (os.TempDir() when
// empty). close removes it.
func newSpool(dir string, n int) (*spool, error) {
	d, err := os.MkdirTemp(dir, "tock-export-")
	if err != nil {
		return nil, fmt.Errorf("spool job ids: %w", err)
	}
	return &spool{dir: d, bufs: make([][]byte, n), limit: max(spoolMinBuffer, spoolMemory/n)}, nil
}

func (s *spool) path(id shard.ID) string { return filepath.Join(s.dir, fmt.Sprintf("%04d", id)) }

// add spools ids of shard id.
func (s *spool) add(id shard.ID, ids []string) error {
	b := s.bufs[id]
	for _, j := range ids {
		b = binary.AppendUvarint(b, uint64(len(j)))
		b = append(b, j...)
	}
	s.bufs[id] = b
	if len(b) >= s.limit {
		return s.flushShard(id)
	}
	return nil
}

// flush appends what is buffered to the shard files.
func (s *spool) flush() error {
	for id := range s.bufs {
		if err := s.flushShard(shard.ID(id)); err != nil {
			return err
		}
	}
	return nil
}

func (s *spool) flushShard(id shard.ID) error {
	b := s.bufs[id]
	if len(b) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.path(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool job ids: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("spool job ids: %w", err)
	}
	s.bufs[id] = b[:0]
	return nil
}

// read calls fn with the ids spooled for shard id, up to batch at a time, in the order
// they were added (none when the shard has no job). fn's error stops read and is
// returned.
func (s *spool) read(id shard.ID, batch int, fn func(ids []string) error) error {
	f, err := os.Open(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read spooled job ids: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	ids := make([]string, 0, batch)
	var buf []byte
	for {
		n, err := binary.ReadUvarint(r)
		if err == io.EOF {
			break
		}
		if err == nil {
			if n > 1<<20 {
				err = fmt.Errorf("id of %d bytes", n)
			} else {
				buf = slices.Grow(buf[:0], int(n))[:n]
				_, err = io.ReadFull(r, buf)
			}
		}
		if err != nil {
			return fmt.Errorf("read spooled job ids of shard %d: %w", id, err)
		}
		if ids = append(ids, string(buf)); len(ids) == batch {
			if err := fn(ids); err != nil {
				return err
			}
			ids = make([]string, 0, batch)
		}
	}
	if len(ids) > 0 {
		return fn(ids)
	}
	return nil
}

// remove deletes the file of shard id, once read.
func (s *spool) remove(id shard.ID) {
	_ = os.Remove(s.path(id)) // best effort: close removes the directory in any case
}

// close removes the spool's directory and everything in it.
func (s *spool) close() error { return os.RemoveAll(s.dir) }
