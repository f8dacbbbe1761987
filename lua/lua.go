// Package lua holds tock's Redis scripts, one .lua file per operation, with their
// expanded sources and SHA-1s, and all of them as one Redis function library (the shard
// package runs them with FCALL on Redis 7 and later, and with EVALSHA, falling back to
// EVAL, where there are no functions).
//
// Each script documents its KEYS, ARGV and replies in its header; those headers are the
// reference for the data model. A line `--- @include "name"` brings in include/name.lua
// (BullMQ's convention) and the includes that one names in turn, each once and after the
// includes it uses; includes may not be circular. They are placed where the script's
// first include line is, and only the top-level declarations the script uses (directly
// or through other kept declarations) are kept: Redis runs a script's whole text on
// every call, and defining unused helpers cost about 2 µs a call.
//
// The includes: common (clock, counts, due buckets, ready sets, run states, history,
// schedules), one per storage form of a job or run (hash, packed, cold, plain, and record,
// the definition codec packed and cold jobs share), and forms, the seam that scripts
// call to find, read or thaw a job whatever its form (see docs/architecture.md).
//
// Every script touches the keys of one shard only (one Redis Cluster slot) and uses
// redis.call('TIME') as its clock.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.lua include/*.lua
var files embed.FS

var includeRE = regexp.MustCompile(`(?m)^--- @include "([a-z_]+)"\s*$`)

// Source returns the source of script name (without ".lua") with its includes expanded.
func Source(name string) (string, error) {
	return expand(files, name+".lua")
}

// expand returns the script at path with its includes, and theirs, in place of its first
// `--- @include` line: each include once, after the includes it needs, pruned to what the
// script uses.
func expand(fsys fs.FS, path string) (string, error) {
	b, err := fs.ReadFile(fsys, path)
	if err != nil {
		return "", fmt.Errorf("lua: %w", err)
	}
	incs, err := includeOrder(fsys, []string{path})
	if err != nil {
		return "", err
	}
	blob, err := joinIncludes(fsys, incs)
	if err != nil {
		return "", err
	}
	own := includeRE.ReplaceAllString(string(b), "")
	used := prune(blob, own)
	first := true
	return includeRE.ReplaceAllStringFunc(string(b), func(string) string {
		if first {
			first = false
			return used
		}
		return ""
	}), nil
}

// includeOrder returns the includes that the files at roots use, directly or through
// other includes: each once, after every include it uses itself.
func includeOrder(fsys fs.FS, roots []string) ([]string, error) {
	var order []string
	done := map[string]bool{}
	var visit func(path string, stack []string) error
	visit = func(path string, stack []string) error {
		for _, s := range stack {
			if s == path {
				return fmt.Errorf("lua: circular include %s -> %s", strings.Join(stack, " -> "), path)
			}
		}
		if done[path] {
			return nil
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return fmt.Errorf("lua: %w", err)
		}
		stack = append(stack, path)
		for _, m := range includeRE.FindAllStringSubmatch(string(b), -1) {
			if err := visit("include/"+m[1]+".lua", stack); err != nil {
				return err
			}
		}
		done[path] = true
		if strings.HasPrefix(path, "include/") {
			order = append(order, path)
		}
		return nil
	}
	for _, r := range roots {
		if err := visit(r, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// joinIncludes returns the includes at paths, in order, without their include lines.
func joinIncludes(fsys fs.FS, paths []string) (string, error) {
	var out []string
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return "", fmt.Errorf("lua: %w", err)
		}
		out = append(out, includeRE.ReplaceAllString(string(b), ""))
	}
	return strings.Join(out, "\n"), nil
}

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	// A top-level declaration: `local function name(`, `local a, b = ...` or `local a`.
	declRE = regexp.MustCompile(`^local\s+(?:function\s+([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*(?:=|--|$))`)
)

// prune returns the parts of an include's source that user needs. The source is cut into
// chunks, one per top-level `local` declaration (with the comment lines right above it);
// a chunk is kept when a name it declares appears in user or in another kept chunk. Any
// mention counts, even in a comment, so pruning can only keep too much, never too
// little; a chunk that declares nothing (the file's header) is kept.
func prune(src, user string) string {
	type chunk struct {
		lines []string
		names []string
	}
	var chunks []*chunk
	cur := &chunk{}
	for _, line := range strings.Split(src, "\n") {
		if m := declRE.FindStringSubmatch(line); m != nil {
			next := &chunk{}
			// The comment block right above a declaration belongs to it.
			k := len(cur.lines)
			for k > 0 && strings.HasPrefix(cur.lines[k-1], "--") {
				k--
			}
			next.lines = append(next.lines, cur.lines[k:]...)
			cur.lines = cur.lines[:k]
			chunks = append(chunks, cur)
			cur = next
			names := m[1]
			if names == "" {
				names = m[2]
			}
			for _, n := range strings.Split(names, ",") {
				cur.names = append(cur.names, strings.TrimSpace(n))
			}
		}
		cur.lines = append(cur.lines, line)
	}
	chunks = append(chunks, cur)

	used := map[string]bool{}
	mark := func(text string) {
		for _, id := range identRE.FindAllString(text, -1) {
			used[id] = true
		}
	}
	mark(user)
	keep := make([]bool, len(chunks))
	for changed := true; changed; {
		changed = false
		for i, c := range chunks {
			if keep[i] {
				continue
			}
			needed := len(c.names) == 0
			for _, n := range c.names {
				needed = needed || used[n]
			}
			if needed {
				keep[i], changed = true, true
				mark(strings.Join(c.lines, "\n"))
			}
		}
	}
	var out []string
	for i, c := range chunks {
		if keep[i] {
			out = append(out, c.lines...)
		}
	}
	return strings.Join(out, "\n")
}

// Names lists the scripts (without ".lua"), sorted.
func Names() []string {
	entries, _ := fs.Glob(files, "*.lua")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e, ".lua"))
	}
	sort.Strings(names)
	return names
}

// Script is one loaded script: its expanded source and SHA-1, and its name in Library.
type Script struct {
	Name string // file name without ".lua"
	Src  string // source with includes expanded
	SHA  string // hex SHA-1 of Src, for EVALSHA
	Keys int    // number of KEYS its header declares
	Fn   string // its function in Library, for FCALL
}

// Scripts holds one loaded script per operation. It is read-only and safe for concurrent use.
type Scripts struct {
	// Library is every script as a Redis function library (Redis 7's FUNCTION LOAD): the
	// includes once, then each script as the body of a function named by its Fn. Redis
	// runs an EVAL script's whole text on every call, so every helper it includes is
	// created anew each time (a tenth to a fifth of a call that moves few runs); a
	// library's helpers are created once, when it is loaded. Its name and its functions'
	// names end in a hash of its source, so versions of tock that differ in any script
	// load side by side.
	Library     string
	LibraryName string

	CreateJobs      *Script
	FireDue         *Script
	FireRuns        *Script
	ClaimRuns       *Script
	ExtendRuns      *Script
	FinishRuns      *Script
	CancelJob       *Script
	PauseJob        *Script
	ResumeJob       *Script
	TriggerJob      *Script
	AcquireLease    *Script
	ReleaseLease    *Script
	HeartbeatMember *Script
	UpdateJob       *Script
	RequeueDead     *Script
	DeleteDead      *Script
	DeleteJob       *Script
	ReadJobs        *Script
	RestoreJobs     *Script
	InitNamespace   *Script
	BreakerStep     *Script
	CreateWorkflow  *Script
	CancelWorkflow  *Script
	RetryWorkflow   *Script

	ReadWorkflows     *Script
	RestoreWorkflows  *Script
	SettleDefinitions *Script
}

// Load builds every script. It fails only if an embedded script is malformed.
func Load() (*Scripts, error) {
	s := &Scripts{}
	var all []*Script
	for name, dst := range map[string]**Script{
		"create_jobs":        &s.CreateJobs,
		"fire_due":           &s.FireDue,
		"fire_runs":          &s.FireRuns,
		"claim_runs":         &s.ClaimRuns,
		"extend_runs":        &s.ExtendRuns,
		"finish_runs":        &s.FinishRuns,
		"cancel_job":         &s.CancelJob,
		"pause_job":          &s.PauseJob,
		"resume_job":         &s.ResumeJob,
		"trigger_job":        &s.TriggerJob,
		"acquire_lease":      &s.AcquireLease,
		"release_lease":      &s.ReleaseLease,
		"heartbeat_member":   &s.HeartbeatMember,
		"update_job":         &s.UpdateJob,
		"requeue_dead":       &s.RequeueDead,
		"delete_dead":        &s.DeleteDead,
		"delete_job":         &s.DeleteJob,
		"read_jobs":          &s.ReadJobs,
		"restore_jobs":       &s.RestoreJobs,
		"init_namespace":     &s.InitNamespace,
		"breaker_step":       &s.BreakerStep,
		"create_workflow":    &s.CreateWorkflow,
		"cancel_workflow":    &s.CancelWorkflow,
		"retry_workflow":     &s.RetryWorkflow,
		"read_workflows":     &s.ReadWorkflows,
		"restore_workflows":  &s.RestoreWorkflows,
		"settle_definitions": &s.SettleDefinitions,
	} {
		src, err := Source(name)
		if err != nil {
			return nil, err
		}
		keys, err := DeclaredKeys(name)
		if err != nil {
			return nil, err
		}
		sum := sha1.Sum([]byte(src))
		*dst = &Script{Name: name, Src: src, SHA: hex.EncodeToString(sum[:]), Keys: keys}
		all = append(all, *dst)
	}
	// By name, so that the library's text (and its name) is the same on every load.
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return s, s.buildLibrary(all)
}

// buildLibrary sets Library, LibraryName and the Fn of every one of scripts.
func (s *Scripts) buildLibrary(scripts []*Script) error {
	roots := make([]string, len(scripts))
	for i, sc := range scripts {
		roots[i] = sc.Name + ".lua"
	}
	incs, err := includeOrder(files, roots)
	if err != nil {
		return err
	}
	blob, err := joinIncludes(files, incs)
	if err != nil {
		return err
	}
	var body strings.Builder
	body.WriteString(blob)
	for _, sc := range scripts {
		raw, err := fs.ReadFile(files, sc.Name+".lua")
		if err != nil {
			return fmt.Errorf("lua: %w", err)
		}
		// KEYS and ARGV are the function's parameters; a script ends with its return.
		fmt.Fprintf(&body, "\nlocal function f_%s(KEYS, ARGV)\nreset_state()\n%s\nend\n", sc.Name, includeRE.ReplaceAllString(string(raw), ""))
	}
	sum := sha1.Sum([]byte(body.String()))
	tag := hex.EncodeToString(sum[:6])
	s.LibraryName = "tock_" + tag
	var reg strings.Builder
	for _, sc := range scripts {
		sc.Fn = sc.Name + "_" + tag
		fmt.Fprintf(&reg, "redis.register_function('%s', f_%s)\n", sc.Fn, sc.Name)
	}
	s.Library = "#!lua name=" + s.LibraryName + "\n" + body.String() + reg.String()
	return nil
}

var keysRE = regexp.MustCompile(`(?m)^-- KEYS\[(\d+)\] `)

// DeclaredKeys returns how many KEYS the header of script name declares.
func DeclaredKeys(name string) (int, error) {
	b, err := fs.ReadFile(files, name+".lua")
	if err != nil {
		return 0, fmt.Errorf("lua: %w", err)
	}
	return len(keysRE.FindAllSubmatch(b, -1)), nil
}
