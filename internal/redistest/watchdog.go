package redistest

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// watchdogShare is the part of the test binary's -test.timeout after which [Main]'s
// watchdog reports a hang: before go test's own timeout panic, whose dump of every
// goroutine ends with whatever goroutines came last (miniredis connections, say), so
// that a CI log showing only its last lines would not tell which test hung nor where.
const watchdogShare = 0.8

// project is the import path prefix of the code whose frames the watchdog reports.
const project = "github.com/tockhq/tock/"

// startWatchdog reports a hang of the test binary once it has run for watchdogShare of
// its -test.timeout (never without a timeout), then exits with code 2. It returns the
// function that disarms it.
func startWatchdog(w io.Writer, exit func(int)) (stop func()) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	timeout, err := time.ParseDuration(f.Value.String())
	if err != nil || timeout <= 0 {
		return func() {}
	}
	return armWatchdog(time.Duration(float64(timeout)*watchdogShare), w, exit)
}

// armWatchdog writes the hang report to w and calls exit(2) after the given time,
// unless the returned function is called first.
func armWatchdog(after time.Duration, w io.Writer, exit func(int)) (stop func()) {
	t := time.AfterFunc(after, func() {
		writeHangReport(w, allStacks(), after)
		exit(2)
	})
	return func() { t.Stop() }
}

// allStacks returns the stacks of every goroutine, as a panic prints them.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// writeHangReport writes every stack of dump, then, last so that it is what the end of
// a log shows, a digest of the goroutines that run the project's code: for each
// distinct one, its state, its innermost project frame and the test it serves, with
// how many goroutines share them.
func writeHangReport(w io.Writer, dump []byte, after time.Duration) {
	fmt.Fprintf(w, "\nredistest: the tests still run after %v; every goroutine:\n\n", after)
	w.Write(dump)
	lines := hangDigest(dump)
	fmt.Fprintf(w, "\nredistest: HANG after %v; goroutines in the project's code (%d kinds), longest waits last:\n", after, len(lines))
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintf(w, "redistest: HANG after %v: the goroutines above wait in the project's code\n", after)
}

// hangDigest summarizes a goroutine dump: one line per distinct (state, innermost
// project frame, test) of the goroutines with a project frame, longest waits last (the
// end of a log is what shows).
func hangDigest(dump []byte) []string {
	type entry struct {
		line string
		n    int
		mins int
	}
	var entries []*entry
	byLine := map[string]*entry{}
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		text := string(g)
		header, body, ok := strings.Cut(text, "\n")
		if !ok || !strings.HasPrefix(header, "goroutine ") {
			continue
		}
		state := header
		if i := strings.Index(header, "["); i >= 0 {
			state = strings.TrimSuffix(header[i+1:], "]:")
		}
		if strings.Contains(body, "redistest.writeHangReport") || strings.Contains(body, "redistest.allStacks") {
			continue
		}
		inner, test := "", ""
		frames := strings.Split(body, "\n")
		for i := 0; i+1 < len(frames); i++ {
			fn := frames[i]
			// A frame is its function's line, then its file's, indented.
			if !strings.HasPrefix(fn, project) || !strings.HasPrefix(frames[i+1], "\t") {
				continue
			}
			fn = strings.TrimPrefix(fn, project)
			if j := strings.LastIndex(fn, "("); j > 0 {
				fn = fn[:j]
			}
			loc := strings.TrimSpace(frames[i+1])
			if j := strings.LastIndex(loc, " +"); j > 0 {
				loc = loc[:j]
			}
			loc = loc[strings.LastIndex(loc, "/")+1:]
			if inner == "" {
				inner = fn + " " + loc
			}
			if strings.Contains(fn, ".Test") {
				test = fn
			}
		}
		if inner == "" {
			continue
		}
		line := fmt.Sprintf("[%s] %s", state, inner)
		if test != "" {
			line += " in " + test
		}
		mins := 0
		fmt.Sscanf(state[strings.LastIndex(state, ",")+1:], " %d minutes", &mins)
		e := byLine[line]
		if e == nil {
			e = &entry{line: line}
			byLine[line] = e
			entries = append(entries, e)
		}
		e.n++
		e.mins = max(e.mins, mins)
	}
	slices.SortStableFunc(entries, func(a, b *entry) int { return a.mins - b.mins })
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.line
		if e.n > 1 {
			out[i] += fmt.Sprintf(" (×%d)", e.n)
		}
	}
	return out
}
