package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/shard"
)

// cookieName is the session cookie.
const cookieName = "tock_session"

// viewer is who is looking: the scope the API gives their requests and the CSRF token
// their forms carry.
type viewer struct {
	scope  ingest.Scope
	csrf   string
	cookie string // "" without sessions (no tokens)
	who    string // as the audit log names them (ingest.TokenWho, or ingest.Anonymous)
	remote string // the client's address
}

func (v *viewer) canWrite() bool { return v.scope == ingest.ScopeWrite }

// tag names what a page shows of its viewer (its session's scope and CSRF token) without
// revealing the token: a live page's stream says which viewer's page it updates (events),
// and a page of another session (the tab was hidden while its session ended and another
// began) is reloaded rather than updated. The same for every process of the dashboard
// (the session is in Redis).
func (v *viewer) tag() string {
	sum := sha256.Sum256([]byte(string(v.scope) + "\n" + v.csrf))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// errNoSession: the request has no valid session (login needed).
var errNoSession = errors.New("no session")

// viewerOf returns the request's viewer: without tokens everyone writes (tock dev);
// with tokens, the session of the cookie.
func (u *UI) viewerOf(ctx *fasthttp.RequestCtx) (*viewer, error) {
	if !u.api.AuthRequired() {
		return &viewer{scope: ingest.ScopeWrite, csrf: u.anonCSRF, who: ingest.Anonymous, remote: ctx.RemoteAddr().String()}, nil
	}
	c := string(ctx.Request.Header.Cookie(cookieName))
	if c == "" {
		return nil, errNoSession
	}
	rc, cancel := u.rctx(ctx)
	defer cancel()
	s, err := u.store.GetSession(rc, c)
	if errors.Is(err, shard.ErrNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	scope := ingest.Scope(s.Scope)
	if scope != ingest.ScopeRead && scope != ingest.ScopeWrite {
		return nil, errNoSession
	}
	return &viewer{scope: scope, csrf: s.CSRF, cookie: c, who: s.Who, remote: ctx.RemoteAddr().String()}, nil
}

func (u *UI) rctx(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// sameOrigin reports whether a mutating request comes from a page of this dashboard:
// browsers send Sec-Fetch-Site; older ones send Origin on cross-site POSTs. A request
// with neither (not a browser) still needs the CSRF token.
func sameOrigin(ctx *fasthttp.RequestCtx) bool {
	if sfs := ctx.Request.Header.Peek("Sec-Fetch-Site"); len(sfs) > 0 {
		return string(sfs) == "same-origin"
	}
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 {
		scheme := "http://"
		if ctx.IsTLS() {
			scheme = "https://"
		}
		return string(o) == scheme+string(ctx.Host())
	}
	return true
}

// checkCSRF refuses a mutating request that is cross-site or lacks the viewer's token
// (form field "csrf" or header X-CSRF-Token), compared in constant time.
func checkCSRF(ctx *fasthttp.RequestCtx, v *viewer) bool {
	if !sameOrigin(ctx) {
		return false
	}
	tok := ctx.Request.Header.Peek("X-CSRF-Token")
	if len(tok) == 0 {
		tok = ctx.PostArgs().Peek("csrf")
	}
	return len(tok) > 0 && subtle.ConstantTimeCompare(tok, []byte(v.csrf)) == 1
}

// login serves GET and POST /ui/login.
func (u *UI) login(ctx *fasthttp.RequestCtx) {
	next := safeNext(string(ctx.QueryArgs().Peek("next")))
	if !u.api.AuthRequired() {
		redirect(ctx, next)
		return
	}
	data := map[string]any{"Next": next}
	if ctx.IsPost() {
		if !sameOrigin(ctx) {
			u.fail(ctx, fasthttp.StatusForbidden, "cross-site login refused")
			return
		}
		next = safeNext(string(ctx.PostArgs().Peek("next")))
		secret := strings.TrimSpace(string(ctx.PostArgs().Peek("token")))
		scope := u.api.TokenScope(secret)
		if scope == "" {
			// Who tried is unknown: the secret is not recorded, not even hashed.
			u.api.Record(ctx, shard.AuditEntry{Who: "unknown", Via: "ui", Action: "login.failed", Result: "401 unauthenticated",
				Remote: ctx.RemoteAddr().String()})
			data["Error"] = "unknown token"
			ctx.SetStatusCode(fasthttp.StatusUnauthorized)
			u.render(ctx, "login", &viewer{}, "Log in", data)
			return
		}
		cookie := randToken()
		rc, cancel := u.rctx(ctx)
		who := ingest.TokenWho(secret)
		err := u.store.PutSession(rc, cookie, shard.Session{Scope: string(scope), CSRF: randToken(), Who: who}, u.cfg.SessionTTL)
		cancel()
		if err != nil {
			u.internal(ctx, err)
			return
		}
		u.api.Record(ctx, shard.AuditEntry{Who: who, Via: "ui", Action: "login", Target: string(scope), Result: "ok", Remote: ctx.RemoteAddr().String()})
		u.setCookie(ctx, cookie, u.cfg.SessionTTL)
		redirect(ctx, next)
		return
	}
	u.render(ctx, "login", &viewer{}, "Log in", data)
}

// logout serves POST /ui/logout: the session ends in Redis, the cookie is cleared.
func (u *UI) logout(ctx *fasthttp.RequestCtx, v *viewer) {
	if v.cookie != "" {
		rc, cancel := u.rctx(ctx)
		err := u.store.DeleteSession(rc, v.cookie)
		cancel()
		if err != nil {
			u.internal(ctx, err)
			return
		}
	}
	if u.api.AuthRequired() {
		u.api.Record(ctx, shard.AuditEntry{Who: v.who, Via: "ui", Action: "logout", Result: "ok", Remote: v.remote})
	}
	u.setCookie(ctx, "", -1)
	redirect(ctx, Prefix+"/login")
}

func (u *UI) setCookie(ctx *fasthttp.RequestCtx, value string, ttl time.Duration) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(cookieName)
	c.SetValue(value)
	c.SetPath(Prefix)
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(u.cfg.SecureCookie || ctx.IsTLS())
	if ttl > 0 {
		c.SetMaxAge(int(ttl / time.Second))
	} else {
		c.SetExpire(fasthttp.CookieExpireDelete)
	}
	ctx.Response.Header.SetCookie(c)
}

// safeNext keeps a redirect target inside the dashboard.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/"
	}
	if _, err := url.ParseRequestURI(next); err != nil {
		return Prefix + "/"
	}
	return next
}

func redirect(ctx *fasthttp.RequestCtx, to string) {
	ctx.Response.Header.Set(fasthttp.HeaderLocation, to)
	ctx.SetStatusCode(fasthttp.StatusSeeOther)
}

// wantsJSON: a request of the script (fetch) rather than a form.
func wantsJSON(ctx *fasthttp.RequestCtx) bool {
	return bytes.Contains(ctx.Request.Header.Peek(fasthttp.HeaderAccept), []byte("application/json"))
}
