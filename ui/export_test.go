package ui

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/tockhq/tock/ingest"
)

// LiveStream is one page's event stream without its connection, for tests and
// benchmarks: Next makes the check the stream's writer makes every LiveEvery.
type LiveStream struct {
	s *stream
	n int
}

// NewLiveStream opens the stream of page (a dashboard URL) for the viewer of a server
// without tokens, for a page that shows version since ("": unknown).
func (u *UI) NewLiveStream(page, since string) (*LiveStream, error) {
	target, err := url.Parse(page)
	if err != nil {
		return nil, err
	}
	name, id, ok := pageOfPath(strings.TrimPrefix(target.EscapedPath(), Prefix))
	if !ok || len(defs[name].live) == 0 {
		return nil, fmt.Errorf("no live page: %s", page)
	}
	v := &viewer{scope: ingest.ScopeWrite, csrf: u.anonCSRF, who: ingest.Anonymous, remote: "127.0.0.1:1"}
	return &LiveStream{s: &stream{u: u, v: v, name: name, id: id, q: target.Query(), version: since}}, nil
}

// Next returns the update the stream sends now, or nil when there is none. It loads the
// page itself: a stream's checks are LiveEvery apart, and those of the page's streams
// share a load for half of it (liveLoad), which calls made at will would share with
// the ones before; and it leaves no load shared behind it.
func (l *LiveStream) Next(ctx context.Context) ([]byte, error) {
	l.s.u.dropLoads()
	defer l.s.u.dropLoads()
	b, err := l.s.next(ctx, l.n)
	l.n++
	return b, err
}

func (u *UI) dropLoads() {
	u.loadsMu.Lock()
	clear(u.loads)
	u.loadsMu.Unlock()
}
