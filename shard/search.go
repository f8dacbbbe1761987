package shard

import (
	"context"
	"fmt"
)

// ListProgress says how far a List cursor has got: done of total parts, where the parts
// are the shards' packed-job hashes (HSCAN) and then each primary's keyspace (SCAN).
// An empty cursor is a finished listing. A cursor that does not decode is a
// *job.FieldError naming "cursor".
func (s *Store) ListProgress(ctx context.Context, cursor string) (done, total int, err error) {
	addrs, _, err := Primaries(ctx, s.c)
	if err != nil {
		return 0, 0, fmt.Errorf("list progress: %w", err)
	}
	total = s.cfg.Shards + len(addrs)
	if cursor == "" {
		return total, total, nil
	}
	packed, node, _, err := decodeListCursor(cursor, addrs, s.cfg.Shards)
	if err != nil {
		return 0, 0, err
	}
	if packed < s.cfg.Shards {
		return packed, total, nil
	}
	return s.cfg.Shards + node, total, nil
}
