package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Session is a dashboard login: what its token may do and the token that its forms must
// carry against cross-site requests. It is kept in Redis (Keys.Session) so that every
// API process behind a load balancer knows it and logout ends it everywhere; the key is
// the SHA-256 of the cookie, so a read of Redis does not yield usable cookies.
type Session struct {
	Scope string
	CSRF  string
	// Who logged in, as the audit log names them (ingest.TokenWho: a hash prefix of the
	// token, never the token).
	Who string
}

func sessionSum(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// PutSession stores session s under cookie for ttl.
func (s *Store) PutSession(ctx context.Context, cookie string, ses Session, ttl time.Duration) error {
	err := s.c.Do(ctx, s.c.B().Set().Key(s.keys.Session(sessionSum(cookie))).Value(ses.Scope+"|"+ses.CSRF+"|"+ses.Who).
		Px(ttl).Build()).Error()
	if err != nil {
		return fmt.Errorf("store session: %w", err)
	}
	return nil
}

// GetSession returns the session of cookie; ErrNotFound when there is none (expired or
// ended).
func (s *Store) GetSession(ctx context.Context, cookie string) (Session, error) {
	v, err := s.c.Do(ctx, s.c.B().Get().Key(s.keys.Session(sessionSum(cookie))).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session: %w", err)
	}
	scope, rest, _ := strings.Cut(v, "|")
	csrf, who, _ := strings.Cut(rest, "|")
	return Session{Scope: scope, CSRF: csrf, Who: who}, nil
}

// DeleteSession ends the session of cookie (nothing when there is none).
func (s *Store) DeleteSession(ctx context.Context, cookie string) error {
	if err := s.c.Do(ctx, s.c.B().Del().Key(s.keys.Session(sessionSum(cookie))).Build()).Error(); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}
