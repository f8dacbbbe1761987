package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"
)

// readmeMarker precedes each fenced shell block of the README that runs, in order,
// against tock dev.
const readmeMarker = "<!-- TestREADME_ExamplesRunAgainstDev runs this block against tock dev -->"

// The README's examples run as written, in order, against tock dev (with --demo, as the
// README starts it): every command must succeed. They run in a small shell that knows
// the README's commands (tock in-process, curl, echo, jq .path) and the shell syntax it
// uses (quotes, $VAR, VAR=value, |, &&, comments); anything else fails the test, so a
// README example that could not run as written cannot be added unnoticed. A command
// that fails is retried for a few seconds, as a reader typing the next line would give
// the previous one time (a run dies a moment after it fires).
func TestREADME_ExamplesRunAgainstDev(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	blocks := readmeBlocks(string(raw))
	require.Len(t, blocks, 2, "the README's HTTP API and command line examples")

	u, _ := startDevWith(t, devOptions{demo: true})
	sh := &miniShell{t: t, vars: map[string]string{}, env: map[string]string{"TOCK_API": u}}
	for _, b := range blocks {
		script := strings.ReplaceAll(b, defaultAPI, u)
		lists, err := parseShell(script)
		require.NoError(t, err, "README block:\n%s", b)
		for _, l := range lists {
			sh.runList(l)
		}
	}
}

// readmeBlocks returns the fenced shell blocks that follow readmeMarker.
func readmeBlocks(readme string) []string {
	re := regexp.MustCompile("(?s)" + regexp.QuoteMeta(readmeMarker) + "\n```sh\n(.*?)```")
	var blocks []string
	for _, m := range re.FindAllStringSubmatch(readme, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

func TestParseShell(t *testing.T) {
	t.Parallel()
	lists, err := parseShell(`API=http://x
# a comment
curl -s -X POST "$API/v1/jobs:batch" -d '[
  {"a": 1}]'   # trailing comment
echo 'x' | tock jobs create --file - && tock dead ls \
  --all
`)
	require.NoError(t, err)
	require.Equal(t, []shellList{
		{{{"API=http://x"}}},
		{{{"curl", "-s", "-X", "POST", "\x00API\x00/v1/jobs:batch", "-d", "[\n  {\"a\": 1}]"}}},
		{{{"echo", "x"}, {"tock", "jobs", "create", "--file", "-"}}, {{"tock", "dead", "ls", "--all"}}},
	}, lists)
	sh := &miniShell{vars: map[string]string{"API": "http://x"}}
	require.Equal(t, "http://x/v1/jobs:batch", sh.expand("\x00API\x00/v1/jobs:batch"))
	for _, bad := range []string{`echo 'open`, `echo "open`, `tock jobs ls > out`, "echo `date`"} {
		_, err = parseShell(bad)
		require.Error(t, err, bad)
	}
}

// A shellList is commands joined by &&; each is a pipeline of simple commands (argv).
type shellList [][][]string

// parseShell parses the shell syntax the README uses into lists of pipelines. Variables
// are expanded when the list runs: a word holds "\x00NAME\x00" for $NAME.
func parseShell(src string) ([]shellList, error) {
	var (
		lists []shellList
		list  shellList
		pipe  [][]string
		cmd   []string
		word  strings.Builder
		inW   bool // a word is open (maybe empty, after quotes)
	)
	endWord := func() {
		if inW {
			cmd = append(cmd, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(cmd) > 0 {
			pipe = append(pipe, cmd)
			cmd = nil
		}
	}
	endPipe := func() {
		endCmd()
		if len(pipe) > 0 {
			list = append(list, pipe)
			pipe = nil
		}
	}
	endList := func() {
		endPipe()
		if len(list) > 0 {
			lists = append(lists, list)
			list = nil
		}
	}
	readVar := func(r []rune, i int) (string, int) {
		j := i
		for j < len(r) && (r[j] == '_' || unicode.IsLetter(r[j]) || unicode.IsDigit(r[j])) {
			j++
		}
		return string(r[i:j]), j
	}
	r := []rune(src)
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == '\\' && i+1 < len(r) && r[i+1] == '\n':
			i++ // line continuation
		case c == '\n' || c == ';':
			endList()
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inW:
			for i < len(r) && r[i] != '\n' {
				i++
			}
			i--
		case c == '&' && i+1 < len(r) && r[i+1] == '&':
			endPipe()
			i++
		case c == '|':
			endCmd()
		case c == '\'':
			j := i + 1
			for j < len(r) && r[j] != '\'' {
				j++
			}
			if j == len(r) {
				return nil, fmt.Errorf("unterminated ' quote")
			}
			word.WriteString(string(r[i+1 : j]))
			i = j
			inW = true
		case c == '"':
			inW = true
			i++
			for ; i < len(r) && r[i] != '"'; i++ {
				switch {
				case r[i] == '\\' && i+1 < len(r) && strings.ContainsRune(`"\$`, r[i+1]):
					i++
					word.WriteRune(r[i])
				case r[i] == '$':
					name, j := readVar(r, i+1)
					word.WriteString("\x00" + name + "\x00")
					i = j - 1
				default:
					word.WriteRune(r[i])
				}
			}
			if i >= len(r) {
				return nil, fmt.Errorf(`unterminated " quote`)
			}
		case c == '$':
			name, j := readVar(r, i+1)
			word.WriteString("\x00" + name + "\x00")
			i = j - 1
			inW = true
		case c == '<' || c == '>' || c == '`' || c == '(' || c == ')':
			return nil, fmt.Errorf("%q: the README test's shell has no redirections or subshells", c)
		default:
			word.WriteRune(c)
			inW = true
		}
	}
	endList()
	return lists, nil
}

// miniShell runs parsed README commands against tock dev.
type miniShell struct {
	t    *testing.T
	vars map[string]string // shell variables
	env  map[string]string // the environment of tock commands
}

var varRefRE = regexp.MustCompile("\x00([A-Za-z_][A-Za-z0-9_]*)\x00")

func (sh *miniShell) expand(w string) string {
	return varRefRE.ReplaceAllStringFunc(w, func(m string) string { return sh.vars[strings.Trim(m, "\x00")] })
}

// runList runs commands joined by &&, again until they all succeed, for up to 15s.
func (sh *miniShell) runList(l shellList) {
	t := sh.t
	t.Helper()
	line := sh.text(l)
	deadline := time.Now().Add(15 * time.Second)
	for attempt := 1; ; attempt++ {
		out, err := sh.tryList(l)
		if err == nil {
			t.Logf("$ %s\n%s", line, out)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("README command failed (after %d attempts): %s\n%v\n%s", attempt, line, err, out)
		}
		time.Sleep(100 * time.Millisecond) // a reader's pace, not a synchronisation
	}
}

func (sh *miniShell) text(l shellList) string {
	var parts []string
	for _, p := range l {
		var cmds []string
		for _, c := range p {
			var words []string
			for _, w := range c {
				words = append(words, sh.expand(w))
			}
			cmds = append(cmds, strings.Join(words, " "))
		}
		parts = append(parts, strings.Join(cmds, " | "))
	}
	return strings.Join(parts, " && ")
}

func (sh *miniShell) tryList(l shellList) (string, error) {
	var all strings.Builder
	for _, p := range l {
		in := ""
		for _, c := range p {
			argv := make([]string, len(c))
			for i, w := range c {
				argv[i] = sh.expand(w)
			}
			out, err := sh.runCmd(argv, in)
			if err != nil {
				return all.String() + out, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
			}
			in = out
		}
		all.WriteString(in)
	}
	return all.String(), nil
}

func (sh *miniShell) runCmd(argv []string, in string) (string, error) {
	t := sh.t
	if len(argv) == 1 && strings.Contains(argv[0], "=") {
		name, v, _ := strings.Cut(argv[0], "=")
		sh.vars[name] = v
		return "", nil
	}
	switch argv[0] {
	case "tock":
		ctx := context.Background()
		if sliceHas(argv, "--watch") { // runs until Ctrl-C: a few redraws
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
		}
		r := runTock(t, ctx, sh.env, in, argv[1:]...)
		return r.out + r.errOut, r.err
	case "echo":
		return strings.Join(argv[1:], " ") + "\n", nil
	case "curl":
		return curl(argv[1:])
	case "jq":
		require.Len(t, argv, 2, "jq with one path filter")
		return jqPath(argv[1], in)
	}
	t.Fatalf("the README runs %q, which the README test's shell does not know: teach it, or keep the example runnable", argv[0])
	return "", nil
}

func sliceHas(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// curl does what curl -s [-X METHOD] [-H 'K: V']... [-d DATA] URL does, and fails on an
// HTTP error status (4xx, 5xx) as curl --fail would.
func curl(args []string) (string, error) {
	method, url, data := "", "", ""
	hdr := http.Header{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-s", "--silent":
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d", "--data":
			i++
			data = args[i]
		default:
			if strings.HasPrefix(a, "-") {
				return "", fmt.Errorf("curl %s: not known to the README test", a)
			}
			url = a
		}
	}
	if method == "" {
		method = http.MethodGet
		if data != "" {
			method = http.MethodPost
		}
	}
	var body io.Reader
	if data != "" {
		body = strings.NewReader(data)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return "", err
	}
	req.Header = hdr
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 400 {
		return string(b), fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return string(b) + "\n", nil
}

// jqPath does what jq .a.b does: prints the value at the path of the JSON document in.
func jqPath(filter, in string) (string, error) {
	if !strings.HasPrefix(filter, ".") {
		return "", fmt.Errorf("jq %s: the README test knows path filters only", filter)
	}
	var v any
	if err := json.NewDecoder(strings.NewReader(in)).Decode(&v); err != nil {
		return "", fmt.Errorf("jq: %w", err)
	}
	for _, k := range strings.Split(strings.TrimPrefix(filter, "."), ".") {
		if k == "" {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("jq %s: not an object", filter)
		}
		v = m[k]
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return b.String(), nil
}
