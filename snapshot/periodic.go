package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// PeriodicConfig configures RunPeriodic.
type PeriodicConfig struct {
	// Store is the namespace to export. Required.
	Store *shard.Store
	// To is where snapshots go: a directory, file:///dir or s3://bucket?... (see
	// OpenBucket). Required.
	To string
	// Every is the export interval. Default 1h, at least 1s.
	Every time.Duration
	// Keep is how many complete snapshots of the namespace are kept; older ones are
	// deleted after each export (see Prune). Default 24; a negative value keeps all.
	Keep int
	// Parallel is ExportOptions.Parallel. Default 4.
	Parallel int
	// Logger receives a line per export and the errors (rate-limited). Nil discards.
	Logger *slog.Logger
}

func (c PeriodicConfig) withDefaults() PeriodicConfig {
	if c.Every == 0 {
		c.Every = time.Hour
	}
	if c.Keep == 0 {
		c.Keep = 24
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c PeriodicConfig) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("snapshot: Store is required")
	case c.To == "":
		return errors.New("snapshot: To is required: a directory, file:///dir or s3://bucket")
	case c.Every < time.Second:
		return fmt.Errorf("snapshot: Every must be at least 1s, got %s", c.Every)
	case c.Parallel < 0:
		return fmt.Errorf("snapshot: Parallel must not be negative, got %d", c.Parallel)
	}
	return nil
}

// RunPeriodic exports a snapshot of cfg.Store's namespace to cfg.To when it starts and
// then every cfg.Every, and prunes old snapshots after each export, until ctx ends; then
// it returns nil. It returns an error only when cfg is invalid or cfg.To cannot be
// opened, before any export. A failed export or prune is logged (at most once a minute)
// and tried again at the next period: it never stops the loop.
//
// When several processes run RunPeriodic on one namespace, about one export happens per
// period: before exporting, each claims the period in Redis (shard.Store.ClaimSnapshotPeriod,
// for 90% of a period), and skips its turn when another process holds the claim.
func RunPeriodic(ctx context.Context, cfg PeriodicConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	b, err := OpenBucket(ctx, cfg.To)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer b.Close()
	logger := cfg.Logger.With("component", "snapshot")
	owner := claimOwner()
	errLog := limit.NewEvery(time.Minute)
	logErr := func(msg string, err error) {
		if ctx.Err() == nil && errLog.Allow() {
			logger.ErrorContext(ctx, msg, "error", err, "to", cfg.To)
		}
	}
	ns := cfg.Store.Config().Namespace
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		claimed, err := cfg.Store.ClaimSnapshotPeriod(ctx, owner, cfg.Every*9/10)
		switch {
		case err != nil:
			logErr("snapshot export", err)
		case claimed:
			start := time.Now()
			m, err := Export(ctx, cfg.Store, b, ExportOptions{Parallel: cfg.Parallel})
			if err != nil {
				logErr("snapshot export", err)
				break
			}
			logger.InfoContext(ctx, "snapshot exported", "id", m.ID, "jobs", m.Jobs, "bytes", m.Bytes,
				"duration", time.Since(start).Round(time.Millisecond))
			if cfg.Keep > 0 {
				deleted, err := Prune(ctx, b, ns, cfg.Keep)
				if err != nil {
					logErr("snapshot prune", err)
				} else if len(deleted) > 0 {
					logger.InfoContext(ctx, "snapshots pruned", "deleted", deleted)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// claimOwner names this process in the periodic export's claim: host name, process id and
// a random suffix.
func claimOwner() string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand)
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(rnd[:]))
}
