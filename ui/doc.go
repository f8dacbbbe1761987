// Package ui is tock's web dashboard, served at /ui/ on the API's address by tock
// server, tock ingest and tock dev (Mount).
//
// The pages are Go templates (html/template, so everything is escaped by construction)
// rendered on the server, with one small script (static/app.js) for the parts that need
// a browser: live updates over Server-Sent Events (polling when those fail), bulk
// actions with a progress bar, charts (uPlot, vendored under static/vendor). Everything
// is embedded in the binary; no Node toolchain is needed to build it and no CDN to use it.
//
// API first: every page reads the API (package ingest) in-process, through the same
// handlers and with the same scopes as a script with a token (ingest.Server.ServeAs), and
// never reads Redis keys itself. Sessions are kept in Redis through package shard so that
// any API process knows them and logout ends them everywhere.
//
// Security: with tokens configured, a login form takes a token once and sets a session
// cookie (HttpOnly, SameSite=Strict, Path=/ui); a read token's session sees no action
// buttons and the API refuses its actions (403). Every mutating request must come from
// the same origin (Sec-Fetch-Site, else Origin) and carry the session's CSRF token. The
// Content-Security-Policy allows scripts and styles from the dashboard only. Without
// tokens (tock dev) there is no login.
package ui
