package ui

import (
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"html/template"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the dashboard is served.
const Prefix = "/ui"

// Defaults of Config.
const (
	DefaultSessionTTL = 12 * time.Hour
	DefaultLiveEvery  = time.Second
)

// Config configures the dashboard.
type Config struct {
	// API is the server the dashboard is mounted on and reads. Required.
	API *ingest.Server
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL time.Duration
	// SecureCookie marks the session cookie Secure (send it over HTTPS only). Set it when
	// a TLS proxy fronts the API; it is also set for requests that came over TLS.
	SecureCookie bool
	// LiveEvery is the interval of the live updates (Server-Sent Events): at most one
	// update per interval per page. Default 1s.
	LiveEvery time.Duration
	// NowFunc is the clock of the cron previews. Default time.Now.
	NowFunc func() time.Time
	// Logger receives errors. Nil discards.
	Logger *slog.Logger
}

// UI serves the dashboard. Its methods are safe for concurrent use.
type UI struct {
	cfg    Config
	api    *ingest.Server
	store  *shard.Store
	log    *slog.Logger
	pages  map[string]*template.Template
	static fasthttp.RequestHandler
	// anonCSRF is the CSRF token of the pages when the API has no tokens (no sessions).
	anonCSRF string
	// seed is the seed of the pages' versions (load): a page rendered by another
	// process has another version, and its stream starts with a whole update.
	seed maphash.Seed
	// loads are the live pages' loads that their streams share (liveLoad), by scope,
	// page and query.
	loadsMu sync.Mutex
	loads   map[string]*sharedLoad
	// liveLog rate-limits the streams' failures: one line a second for all streams (a
	// failure, Redis unreachable, fails every open stream's check every second).
	liveLog *limit.Every
}

// New returns the dashboard of cfg.API.
func New(cfg Config) (*UI, error) {
	if cfg.API == nil {
		return nil, errors.New("ui: API is required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < time.Minute {
		return nil, fmt.Errorf("ui: SessionTTL: must be at least 1m, got %s", cfg.SessionTTL)
	}
	if cfg.LiveEvery == 0 {
		cfg.LiveEvery = DefaultLiveEvery
	}
	if cfg.LiveEvery < 100*time.Millisecond {
		return nil, fmt.Errorf("ui: LiveEvery: must be at least 100ms, got %s", cfg.LiveEvery)
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	u := &UI{cfg: cfg, api: cfg.API, store: cfg.API.Store(), log: cfg.Logger.With("component", "ui"), anonCSRF: randToken(),
		seed: maphash.MakeSeed(), loads: map[string]*sharedLoad{}, liveLog: limit.NewEvery(time.Second)}
	var err error
	if u.pages, err = parseTemplates(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	u.static = staticHandler(sub)
	return u, nil
}

// Mount creates the dashboard of cfg.API and mounts it at /ui on it (before it starts).
func Mount(cfg Config) (*UI, error) {
	u, err := New(cfg)
	if err != nil {
		return nil, err
	}
	cfg.API.Mount(Prefix, u.Handler)
	return u, nil
}

// randToken returns 32 random bytes, base64url.
func randToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
