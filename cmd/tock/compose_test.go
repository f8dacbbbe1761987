package main

// The deployment files (docker-compose.yml, Dockerfile, docs/deploy.md) are checked
// here against the binaries they run, since no Docker engine runs the tests: the file
// is parsed as Compose would read it (YAML with anchors and merge keys, then variable
// interpolation), and every command, flag and TOCK_* variable a service uses is looked
// up in the --help output of the binary that the service's Dockerfile target builds.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// moduleRoot is the module root, from this package's directory.
const moduleRoot = "../.."

// The services docker-compose.yml must have; docs/deploy.md names them.
var (
	composeRedisNodes = []string{"redis-1", "redis-2", "redis-3", "redis-4", "redis-5", "redis-6"}
	composeServers    = []string{"tock-a", "tock-b"}
	composeBench      = []string{"bench", "bench-ingest"}
	composeOthers     = []string{"redis-cluster-init", "minio", "minio-init", "worker"}
)

// composeFile is the part of the Compose file format that docker-compose.yml uses.
// Decoding is strict (unknownKeys): a key missing here is an error, which catches
// typos (Compose would reject most of them too); add keys as the file needs them.
type composeFile struct {
	Name       string                     `yaml:"name"`
	Services   map[string]*composeService `yaml:"services"`
	Volumes    map[string]any             `yaml:"volumes"`
	Networks   map[string]any             `yaml:"networks"`
	Extensions map[string]any             `yaml:",inline"` // x-… fields
}

type composeService struct {
	Image           string              `yaml:"image"`
	Build           *composeBuild       `yaml:"build"`
	Command         stringOrList        `yaml:"command"`
	Entrypoint      stringOrList        `yaml:"entrypoint"`
	Environment     composeEnv          `yaml:"environment"`
	Ports           []composePort       `yaml:"ports"`
	DependsOn       composeDependsOn    `yaml:"depends_on"`
	Profiles        []string            `yaml:"profiles"`
	Restart         string              `yaml:"restart"`
	Healthcheck     *composeHealthcheck `yaml:"healthcheck"`
	Volumes         []string            `yaml:"volumes"`
	StopGracePeriod string              `yaml:"stop_grace_period"`
	Hostname        string              `yaml:"hostname"`
	User            string              `yaml:"user"`
	Networks        any                 `yaml:"networks"`
	Deploy          any                 `yaml:"deploy"`
	Labels          any                 `yaml:"labels"`
	Logging         any                 `yaml:"logging"`
	Ulimits         any                 `yaml:"ulimits"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Target     string            `yaml:"target"`
	Args       map[string]string `yaml:"args"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

type composeHealthcheck struct {
	Test        stringOrList `yaml:"test"`
	Interval    string       `yaml:"interval"`
	Timeout     string       `yaml:"timeout"`
	Retries     int          `yaml:"retries"`
	StartPeriod string       `yaml:"start_period"`
	Disable     bool         `yaml:"disable"`
}

// stringOrList is a command: a list, or a string split as a shell would.
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		f, err := composeSplit(n.Value)
		*s = f
		return err
	}
	return n.Decode((*[]string)(s))
}

// composeEnv is environment: a map (null values pass the host's through) or a
// list of NAME=value.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	*e = composeEnv{}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: environment %s: want a string, number or boolean", v.Line, k.Value)
			}
			(*e)[k.Value] = v.Value
		}
	case yaml.SequenceNode:
		for _, v := range n.Content {
			k, val, _ := strings.Cut(v.Value, "=")
			(*e)[k] = val
		}
	default:
		return fmt.Errorf("line %d: environment: want a map or a list", n.Line)
	}
	return nil
}

// composePort is one published port.
type composePort struct {
	HostIP    string
	Published int // 0: none (a random host port)
	Target    int
	Protocol  string
}

func (p *composePort) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var long struct {
			Target    int    `yaml:"target"`
			Published string `yaml:"published"`
			HostIP    string `yaml:"host_ip"`
			Protocol  string `yaml:"protocol"`
			Mode      string `yaml:"mode"`
		}
		if err := n.Decode(&long); err != nil {
			return err
		}
		p.Target, p.HostIP, p.Protocol = long.Target, long.HostIP, long.Protocol
		if long.Published != "" {
			v, err := strconv.Atoi(long.Published)
			if err != nil {
				return fmt.Errorf("line %d: published %q: %w", n.Line, long.Published, err)
			}
			p.Published = v
		}
		return nil
	}
	// [HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]; port ranges are not used here.
	s := n.Value
	s, p.Protocol, _ = strings.Cut(s, "/")
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return fmt.Errorf("line %d: port %q: want [host_ip:][published:]target", n.Line, n.Value)
	}
	if len(parts) == 3 {
		p.HostIP, parts = parts[0], parts[1:]
	}
	var err error
	if p.Target, err = strconv.Atoi(parts[len(parts)-1]); err != nil {
		return fmt.Errorf("line %d: port %q: %w", n.Line, n.Value, err)
	}
	if len(parts) == 2 {
		if p.Published, err = strconv.Atoi(parts[0]); err != nil {
			return fmt.Errorf("line %d: port %q: %w", n.Line, n.Value, err)
		}
	}
	return nil
}

// composeDependsOn maps a dependency to its condition.
type composeDependsOn map[string]string

func (d *composeDependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = composeDependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = "service_started"
		}
		return nil
	}
	var long map[string]struct {
		Condition string `yaml:"condition"`
		Restart   bool   `yaml:"restart"`
		Required  *bool  `yaml:"required"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	for name, c := range long {
		if c.Condition == "" {
			c.Condition = "service_started"
		}
		(*d)[name] = c.Condition
	}
	return nil
}

// composeSplit splits a command string into words as sh does for quotes and
// backslashes (Compose uses the same rules for a string command).
func composeSplit(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

var composeVarRE = regexp.MustCompile(`\$(\$|\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*)?`)

// composeInterpolate resolves Compose variables as they are with an empty environment:
// $$ is a dollar sign and ${NAME:-default} or ${NAME-default} is the default. A
// variable without a default is an error: the file must work without an .env file.
func composeInterpolate(s string) (string, error) {
	var errs []error
	out := composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case m == "$$":
			return "$"
		case strings.HasPrefix(m, "${") && strings.HasSuffix(m, "}"):
			body := m[2 : len(m)-1]
			if i := strings.IndexAny(body, ":-?+"); i > 0 {
				name, op := body[:i], body[i:]
				if !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name) {
					break
				}
				if def, ok := strings.CutPrefix(op, ":-"); ok {
					return def
				}
				if def, ok := strings.CutPrefix(op, "-"); ok {
					return def
				}
			}
			errs = append(errs, fmt.Errorf("%s: give the variable a default (${NAME:-default}) so that the file works without an .env file", m))
			return m
		}
		errs = append(errs, fmt.Errorf("%q in %q: write $$ for a dollar sign, ${NAME:-default} for a variable", m, s))
		return m
	})
	return out, errors.Join(errs...)
}

// composeInterpolateTree interpolates every scalar value (not mapping keys) of a YAML tree
// in place. Anchored nodes are shared by their aliases and done once.
func composeInterpolateTree(n *yaml.Node, seen map[*yaml.Node]bool) error {
	if n == nil || seen[n] {
		return nil
	}
	seen[n] = true
	var errs []error
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			errs = append(errs, composeInterpolateTree(c, seen))
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			errs = append(errs, composeInterpolateTree(n.Content[i], seen))
		}
	case yaml.ScalarNode:
		v, err := composeInterpolate(n.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("docker-compose.yml line %d: %w", n.Line, err))
		}
		n.Value = v
	}
	return errors.Join(errs...)
}

// loadCompose reads docker-compose.yml as Compose would with an empty environment.
func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(raw, &doc), "docker-compose.yml is not valid YAML")
	require.NoError(t, unknownKeys(doc.Content[0], reflect.TypeFor[composeFile](), map[*yaml.Node]bool{}),
		"docker-compose.yml does not match the Compose format (as far as composeFile knows it)")
	require.NoError(t, composeInterpolateTree(&doc, map[*yaml.Node]bool{}))
	var f composeFile
	require.NoError(t, doc.Decode(&f), "docker-compose.yml does not match the Compose format (as far as composeFile knows it)")
	return &f
}

// unknownKeys reports the keys of mapping n that struct type typ has no field for,
// following merge keys (<<) and the fields whose types are structs or maps of them.
// It is yaml.Decoder.KnownFields for a node tree, with the lines of the file. A node
// shared through an anchor is checked once.
func unknownKeys(n *yaml.Node, typ reflect.Type, seen map[*yaml.Node]bool) error {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode || seen[n] {
		return nil
	}
	seen[n] = true
	var errs []error
	switch typ.Kind() {
	case reflect.Map:
		for i := 1; i < len(n.Content); i += 2 {
			errs = append(errs, unknownKeys(n.Content[i], typ.Elem(), seen))
		}
	case reflect.Struct:
		fields := map[string]reflect.Type{}
		inline := false
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if opts == "inline" {
				inline = true
				continue
			}
			fields[name] = f.Type
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, m := range merged {
					errs = append(errs, unknownKeys(m, typ, seen))
				}
				continue
			}
			ft, ok := fields[k.Value]
			switch {
			case ok:
				errs = append(errs, unknownKeys(v, ft, seen))
			case !inline:
				errs = append(errs, fmt.Errorf("line %d: unknown key %q (for %s)", k.Line, k.Value, typ.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// dockerStage is one stage of the Dockerfile.
type dockerStage struct {
	name, from string
	runs       []string   // RUN commands
	copies     [][]string // COPY arguments
	env        map[string]string
	user       string
	entrypoint []string
	expose     []int
}

// loadDockerfile parses the Dockerfile into its stages, with global ARG defaults
// substituted into FROM lines.
func loadDockerfile(t *testing.T) []*dockerStage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot, "Dockerfile"))
	require.NoError(t, err)
	var lines []string
	var cont strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cont.Len() == 0) {
			continue
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(l + " ")
			continue
		}
		cont.WriteString(line)
		lines = append(lines, cont.String())
		cont.Reset()
	}
	require.NoError(t, sc.Err())

	args := map[string]string{}
	var stages []*dockerStage
	for _, line := range lines {
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(os.Expand(rest, func(k string) string { return args[k] }))
			st := &dockerStage{from: f[0], env: map[string]string{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if instr == "ARG" {
				k, v, _ := strings.Cut(rest, "=")
				args[k] = v
			}
			continue
		}
		st := stages[len(stages)-1]
		switch instr {
		case "RUN":
			st.runs = append(st.runs, rest)
		case "COPY":
			st.copies = append(st.copies, strings.Fields(rest))
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				st.env[k] = v
			}
		case "USER":
			st.user = rest
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(rest), &st.entrypoint), "ENTRYPOINT of stage %s: use the exec form, a JSON array", st.name)
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				p, _, _ = strings.Cut(p, "/")
				n, err := strconv.Atoi(p)
				require.NoError(t, err, "EXPOSE %s", rest)
				st.expose = append(st.expose, n)
			}
		}
	}
	return stages
}

func stageByName(stages []*dockerStage, name string) *dockerStage {
	for _, s := range stages {
		if s.name == name {
			return s
		}
	}
	return nil
}

// stageAncestry returns st and the stages it is built FROM, nearest first.
func stageAncestry(stages []*dockerStage, st *dockerStage) []*dockerStage {
	var out []*dockerStage
	for st != nil && !slices.Contains(out, st) {
		out = append(out, st)
		st = stageByName(stages, st.from)
	}
	return out
}

var goBuildRE = regexp.MustCompile(`go build\s.*-o\s+(\S+)\s+(\./\S+)`)

// targetPackage follows a target stage's ENTRYPOINT binary back to the go build that
// made it, and returns the Go package (./cmd/tock) and the binary's name in the image.
func targetPackage(t *testing.T, stages []*dockerStage, target string) (pkg, binary string) {
	t.Helper()
	st := stageByName(stages, target)
	require.NotNil(t, st, "Dockerfile has no stage %q", target)
	require.NotEmpty(t, st.entrypoint, "stage %s has no ENTRYPOINT", target)
	binary = st.entrypoint[0]
	for _, c := range st.copies {
		from, ok := strings.CutPrefix(c[0], "--from=")
		if !ok || len(c) != 3 || c[2] != binary {
			continue
		}
		for _, b := range stageAncestry(stages, stageByName(stages, from)) {
			for _, run := range b.runs {
				if m := goBuildRE.FindStringSubmatch(run); m != nil && m[1] == c[1] {
					cgo := strings.Contains(run, "CGO_ENABLED=0")
					for _, a := range stageAncestry(stages, b) {
						cgo = cgo || a.env["CGO_ENABLED"] == "0"
					}
					require.True(t, cgo, "stage %s builds %s without CGO_ENABLED=0 (the image has no libc)", b.name, m[2])
					require.Contains(t, run, "-trimpath", "stage %s", b.name)
					return m[2], binary
				}
			}
		}
	}
	t.Fatalf("stage %s: no COPY --from=<stage> <file> %s whose stage runs go build -o <file> ./<package>", target, binary)
	return "", ""
}

// builtProgram is a binary that services run, with its --help output.
type builtProgram struct {
	name, path string
	usage      string // `tock help` (top-level usage), "" for single-command programs
}

// line is the program's command line for path, as in messages.
func (p *builtProgram) line(path []string) string {
	return strings.Join(append([]string{p.name}, path...), " ")
}

// help runs the program with args and --help and returns its output; the command
// must exist (exit status 0).
func (p *builtProgram) help(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(p.path, slices.Concat(args, []string{"--help"})...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // no TOCK_* from the test's environment
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s --help: the command does not exist?\n%s", p.line(args), out)
	return string(out)
}

// Flags are listed one per line, indented by a few spaces, as -name (package flag) or
// --name; their descriptions are indented further.
var helpFlagLineRE = regexp.MustCompile(`^ {1,4}--?([A-Za-z0-9][A-Za-z0-9_.-]*)(?:[ \t=,]|$)`)

// helpFlags returns the names of the flags that --help output lists.
func helpFlags(out string) map[string]bool {
	flags := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if m := helpFlagLineRE.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
	}
	return flags
}

var tockEnvRE = regexp.MustCompile(`\bTOCK_[A-Z0-9_]+\b`)

// splitCommand splits a command line into the command words and the flags.
func splitCommand(args []string) (path, flags []string) {
	i := 0
	for i < len(args) && !strings.HasPrefix(args[i], "-") {
		i++
	}
	return args[:i:i], args[i:]
}

// argValue returns the value of --name (or -name) in args.
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// usageMentions reports whether usage text shows `tock w1 w2…`, where a word may
// be one alternative of `a|b|c`.
func usageMentions(usage, prog string, path []string) bool {
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		for i := range f {
			if f[i] != prog {
				continue
			}
			ok := true
			for j, w := range path {
				if i+1+j >= len(f) || !slices.Contains(strings.Split(f[i+1+j], "|"), w) {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// buildTargets builds the Go packages of the Dockerfile targets into a temporary
// directory, as the Dockerfile does.
func buildTargets(t *testing.T, pkgs map[string]string) map[string]*builtProgram {
	t.Helper()
	dir := t.TempDir()
	var list []string
	for _, pkg := range pkgs {
		if !slices.Contains(list, pkg) {
			list = append(list, pkg)
		}
	}
	slices.Sort(list)
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, list...)...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %v:\n%s", list, out)
	progs := map[string]*builtProgram{}
	for target, pkg := range pkgs {
		name := filepath.Base(pkg)
		p := &builtProgram{name: name, path: filepath.Join(dir, name)}
		if name == "tock" {
			c := exec.Command(p.path, "help")
			u, err := c.CombinedOutput()
			require.NoError(t, err, "tock help:\n%s", u)
			p.usage = string(u)
		}
		progs[target] = p
	}
	return progs
}

// tokenScopes parses TOCK_TOKENS into secret → scope.
func tokenScopes(v string) map[string]string {
	out := map[string]string{}
	for _, tok := range strings.Split(v, ",") {
		if i := strings.LastIndexByte(tok, ':'); i > 0 {
			out[strings.TrimSpace(tok[:i])] = tok[i+1:]
		}
	}
	return out
}

// listenAddrPort returns the port of a listen address such as ":8080" or "0.0.0.0:8080",
// and whether the host is a loopback address (unreachable from outside a container).
func listenAddrPort(t *testing.T, addr string) (port int, loopback bool) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, "listen address %q", addr)
	port, err = strconv.Atoi(p)
	require.NoError(t, err, "listen address %q", addr)
	return port, host == "localhost" || (net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback())
}

func TestCompose(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	stages := loadDockerfile(t)
	svc := func(name string) *composeService {
		t.Helper()
		s := f.Services[name]
		require.NotNil(t, s, "docker-compose.yml has no service %s", name)
		return s
	}

	// Which program each service runs: the Dockerfile target it is built from, or the
	// one that builds the image it names.
	targets := map[string]string{} // service → Dockerfile target
	imageTarget := map[string]string{}
	for name, s := range f.Services {
		if s.Build == nil {
			continue
		}
		require.Equal(t, ".", s.Build.Context, "service %s: build context", name)
		if s.Build.Dockerfile != "" {
			require.Equal(t, "Dockerfile", s.Build.Dockerfile, "service %s", name)
		}
		target := s.Build.Target
		if target == "" {
			target = stages[len(stages)-1].name // the last stage is Docker's default
		}
		require.NotNil(t, stageByName(stages, target), "service %s: Dockerfile has no target %q", name, target)
		targets[name] = target
		if s.Image != "" {
			if prev, ok := imageTarget[s.Image]; ok {
				require.Equal(t, prev, target, "image %s is built from two targets", s.Image)
			}
			imageTarget[s.Image] = target
		}
	}
	for name, s := range f.Services {
		if _, ok := targets[name]; !ok {
			if target, ok := imageTarget[s.Image]; ok {
				targets[name] = target
			}
		}
	}
	pkgs := map[string]string{}
	for _, target := range targets {
		pkgs[target], _ = targetPackage(t, stages, target)
	}
	require.Equal(t, "./cmd/tock", pkgs["tock"], "the tock target builds ./cmd/tock")
	require.Equal(t, "./examples/worker", pkgs["worker"], "the worker target builds ./examples/worker")
	progs := buildTargets(t, pkgs)
	run := func(name string) (*builtProgram, []string, []string) { // program, command words, flags
		p := progs[targets[name]]
		require.NotNil(t, p, "service %s runs no program built here", name)
		path, flags := splitCommand(f.Services[name].Command)
		return p, path, flags
	}
	helps := map[string]string{} // "<program> <path>" → --help output
	helpOf := func(name string) string {
		p, path, _ := run(name)
		key := p.name + " " + strings.Join(path, " ")
		if _, ok := helps[key]; !ok {
			helps[key] = p.help(t, path...)
		}
		return helps[key]
	}

	t.Run("Services", func(t *testing.T) {
		var want []string
		for _, l := range [][]string{composeRedisNodes, composeServers, composeBench, composeOthers} {
			want = append(want, l...)
		}
		var got []string
		for name := range f.Services {
			got = append(got, name)
		}
		require.ElementsMatch(t, want, got)
		require.Equal(t, "tock", f.Name, "the project name")
		for k := range f.Extensions {
			require.True(t, strings.HasPrefix(k, "x-"), "unknown top-level key %q (extension fields start with x-)", k)
		}
		for name, s := range f.Services {
			bench := slices.Contains(composeBench, name)
			if bench {
				require.Equal(t, []string{"bench"}, s.Profiles, "service %s is in profile bench", name)
			} else {
				require.Empty(t, s.Profiles, "service %s starts with docker compose up", name)
			}
			require.True(t, s.Image != "" || s.Build != nil, "service %s has no image", name)
			require.Contains(t, []string{"", "no", "always", "on-failure", "unless-stopped"}, s.Restart, "service %s", name)
		}
	})

	t.Run("RedisNodes", func(t *testing.T) {
		volumes := map[string]string{}
		for _, name := range composeRedisNodes {
			s := svc(name)
			require.Equal(t, "redis-server", s.Command[0], "service %s", name)
			args := s.Command[1:]
			for flag, want := range map[string]string{"appendonly": "yes", "appendfsync": "everysec", "cluster-enabled": "yes"} {
				v, _ := argValue(args, flag)
				require.Equal(t, want, v, "service %s: --%s", name, flag)
			}
			if v, ok := argValue(args, "cluster-announce-hostname"); ok {
				require.Equal(t, name, v, "service %s announces its own name", name)
			}
			if v, ok := argValue(args, "port"); ok {
				require.Equal(t, "6379", v, "service %s", name)
			}
			require.NotNil(t, s.Healthcheck, "service %s needs a healthcheck (the cluster init waits for it)", name)
			require.NotEmpty(t, s.Healthcheck.Test)
			dir, _ := argValue(args, "dir")
			require.NotEmpty(t, dir, "service %s: --dir", name)
			var vol string
			for _, v := range s.Volumes {
				if src, dst, _ := strings.Cut(v, ":"); strings.TrimSuffix(dst, ":rw") == dir {
					vol = src
				}
			}
			require.NotEmpty(t, vol, "service %s keeps %s (AOF, nodes.conf) in a volume", name, dir)
			require.Contains(t, f.Volumes, vol, "service %s: volume %s is declared", name, vol)
			require.Empty(t, volumes[vol], "volume %s is used by %s and %s", vol, volumes[vol], name)
			volumes[vol] = name
			require.Empty(t, s.Ports, "service %s: a Cluster node's address only resolves inside the compose network", name)
		}
	})

	t.Run("ClusterInit", func(t *testing.T) {
		s := svc("redis-cluster-init")
		script := strings.Join(append(slices.Clone([]string(s.Entrypoint)), s.Command...), " ")
		i := strings.Index(script, "--cluster create")
		require.GreaterOrEqual(t, i, 0, "redis-cluster-init runs redis-cli --cluster create")
		create := strings.Fields(script[i:])
		create = create[:slices.Index(create, "--cluster-yes")+1]
		require.Contains(t, strings.Join(create, " "), "--cluster-replicas 1", "one replica per master")
		for _, node := range composeRedisNodes {
			require.Contains(t, create, node+":6379", "the cluster create names %s", node)
			require.Equal(t, "service_healthy", s.DependsOn[node], "redis-cluster-init waits for %s", node)
		}
		require.Len(t, create, 2+len(composeRedisNodes)+3, "the cluster create names 6 nodes: %v", create)
		require.Contains(t, []string{"", "no"}, s.Restart, "a one-shot")
		// After down and up the containers have new addresses, which the nodes.conf in
		// the volumes does not know: a formed cluster is introduced again, and a cluster
		// that does not become healthy fails the init instead of blocking it forever.
		require.Contains(t, script, "CLUSTER MEET", "redis-cluster-init introduces the nodes of a formed cluster at their current addresses")
		require.Contains(t, script, "exit 1", "redis-cluster-init gives up on a cluster that does not become healthy")
	})

	t.Run("Commands", func(t *testing.T) {
		for name := range targets {
			p, path, flags := run(name)
			help := helpOf(name)
			if p.usage != "" {
				require.NotEmpty(t, path, "service %s: tock needs a command", name)
				require.True(t, usageMentions(p.usage+help, p.name, path),
					"service %s runs `%s`, which `tock help` does not list", name, p.line(path))
			}
			known := helpFlags(help)
			require.NotEmpty(t, known, "no flags found in `%s --help`:\n%s", p.line(path), help)
			for _, a := range flags {
				if !strings.HasPrefix(a, "-") {
					continue // a value
				}
				fl, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				require.True(t, known[fl], "service %s: `%s` has no flag --%s; its --help:\n%s", name, p.line(path), fl, help)
			}
		}
	})

	t.Run("Environment", func(t *testing.T) {
		for name := range targets {
			p, path, _ := run(name)
			read := map[string]bool{}
			for _, e := range tockEnvRE.FindAllString(helpOf(name), -1) {
				read[e] = true
			}
			for v := range f.Services[name].Environment {
				if strings.HasPrefix(v, "TOCK_") {
					require.True(t, read[v], "service %s sets %s, which `%s --help` does not list (the program does not read it)", name, v, p.line(path))
				}
			}
		}
	})

	t.Run("Ports", func(t *testing.T) {
		hostPorts := map[string]string{}
		for name, s := range f.Services {
			for _, p := range s.Ports {
				require.NotZero(t, p.Published, "service %s: publish port %d on a fixed host port", name, p.Target)
				key := fmt.Sprintf("%s:%d", p.HostIP, p.Published)
				require.Empty(t, hostPorts[key], "host port %s is published by %s and %s", key, hostPorts[key], name)
				hostPorts[key] = name
				require.Contains(t, []string{"", "127.0.0.1"}, p.HostIP,
					"service %s: publish on the host's loopback only (the file's tokens and credentials are examples)", name)
			}
		}
		for _, name := range composeServers {
			_, path, flags := run(name)
			require.Equal(t, []string{"server"}, path, "service %s", name)
			listens := map[int]bool{}
			for _, fl := range []string{"http", "metrics-http"} {
				if addr, ok := argValue(flags, fl); ok {
					port, loopback := listenAddrPort(t, addr)
					require.False(t, loopback, "service %s: --%s %s is unreachable from outside the container", name, fl, addr)
					listens[port] = true
				}
			}
			addr, ok := argValue(flags, "http")
			require.True(t, ok, "service %s: --http (the default listens on loopback only)", name)
			api, _ := listenAddrPort(t, addr)
			published := map[int]bool{}
			for _, p := range f.Services[name].Ports {
				require.True(t, listens[p.Target], "service %s publishes container port %d, on which it does not listen (--http %s)", name, p.Target, addr)
				published[p.Target] = true
			}
			require.True(t, published[api], "service %s: the API port %d is published", name, api)
			require.Contains(t, stageByName(stages, targets[name]).expose, api, "the image EXPOSEs the API port")
		}
		m := svc("minio")
		for _, fl := range []string{"address", "console-address"} {
			addr, ok := argValue(m.Command, fl)
			require.True(t, ok, "minio --%s", fl)
			port, _ := listenAddrPort(t, addr)
			require.True(t, slices.ContainsFunc(m.Ports, func(p composePort) bool { return p.Target == port }), "minio publishes --%s %s", fl, addr)
		}
	})

	t.Run("DependsOn", func(t *testing.T) {
		for name, s := range f.Services {
			for dep, cond := range s.DependsOn {
				d := f.Services[dep]
				require.NotNil(t, d, "service %s depends on %s, which does not exist", name, dep)
				require.NotEqual(t, name, dep)
				require.Empty(t, d.Profiles, "service %s depends on %s of a profile", name, dep)
				switch cond {
				case "service_started":
				case "service_healthy":
					require.NotNil(t, d.Healthcheck, "service %s waits for %s to be healthy, which has no healthcheck", name, dep)
				case "service_completed_successfully":
					require.Contains(t, []string{"", "no"}, d.Restart, "service %s waits for %s to complete, which restarts", name, dep)
				default:
					t.Errorf("service %s: depends_on %s: unknown condition %q", name, dep, cond)
				}
			}
		}
		for _, name := range append(slices.Clone(composeServers), "worker", "bench") {
			require.Equal(t, "service_completed_successfully", svc(name).DependsOn["redis-cluster-init"], "service %s waits for the cluster", name)
		}
	})

	t.Run("Redis", func(t *testing.T) {
		for _, name := range append(slices.Clone(composeServers), "worker", "bench") {
			redis := svc(name).Environment["TOCK_REDIS"]
			require.NotEmpty(t, redis, "service %s: TOCK_REDIS", name)
			for _, addr := range strings.Split(redis, ",") {
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err, "service %s: TOCK_REDIS %q", name, redis)
				require.Contains(t, composeRedisNodes, host, "service %s: TOCK_REDIS names a node", name)
				require.Equal(t, "6379", port)
			}
		}
	})

	t.Run("Servers", func(t *testing.T) {
		names := map[string]bool{}
		for _, name := range composeServers {
			_, _, flags := run(name)
			n, ok := argValue(flags, "name")
			require.True(t, ok, "service %s: --name (a stable dispatcher name)", name)
			require.False(t, names[n], "two servers named %s", n)
			require.NotRegexp(t, `[0-9]$`, n, "service %s: a dispatcher name must not end in a digit", name)
			names[n] = true
			require.Equal(t, svc(composeServers[0]).Environment, svc(name).Environment, "the servers share one configuration")
			require.NotEmpty(t, svc(name).StopGracePeriod, "service %s: time to drain on SIGTERM", name)
		}
		tokens := tokenScopes(svc(composeServers[0]).Environment["TOCK_TOKENS"])
		require.NotEmpty(t, tokens, "the API listens beyond loopback: it needs TOCK_TOKENS")
		for secret, scope := range tokens {
			require.GreaterOrEqual(t, len(secret), 16, "token secrets are at least 16 characters")
			require.Contains(t, []string{"read", "write"}, scope)
		}
	})

	t.Run("Snapshots", func(t *testing.T) {
		env := svc(composeServers[0]).Environment
		to := env["TOCK_SNAPSHOT_TO"]
		u, err := url.Parse(to)
		require.NoError(t, err, "TOCK_SNAPSHOT_TO %q", to)
		require.Equal(t, "s3", u.Scheme)
		q := u.Query()
		endpoint, err := url.Parse(q.Get("endpoint"))
		require.NoError(t, err)
		require.Equal(t, "minio", endpoint.Hostname(), "snapshots go to the minio service")
		addr, _ := argValue(svc("minio").Command, "address")
		port, _ := listenAddrPort(t, addr)
		require.Equal(t, strconv.Itoa(port), endpoint.Port(), "the endpoint's port is minio's --address")
		require.Equal(t, "true", q.Get("use_path_style"), "MinIO needs path-style requests")
		require.NotEmpty(t, q.Get("region"))
		for k := range q {
			// The query parameters gocloud.dev/blob/s3blob (v0.4x) accepts.
			require.Contains(t, []string{"region", "endpoint", "use_path_style", "disable_https", "prefix",
				"profile", "hostname_immutable", "anonymous", "awssdk", "ssetype", "kmskeyid", "accelerate"}, k, "TOCK_SNAPSHOT_TO parameter %s", k)
		}
		init := svc("minio-init")
		require.Contains(t, strings.Join(init.Command, " "), "mc mb --ignore-existing local/"+u.Host, "minio-init makes the bucket %s", u.Host)
		require.Equal(t, "service_completed_successfully", svc(composeServers[0]).DependsOn["minio-init"])
		m := svc("minio").Environment
		require.Equal(t, m["MINIO_ROOT_USER"], env["AWS_ACCESS_KEY_ID"])
		require.Equal(t, m["MINIO_ROOT_PASSWORD"], env["AWS_SECRET_ACCESS_KEY"])
		require.Equal(t, m, init.Environment)
		every := env["TOCK_SNAPSHOT_EVERY"]
		require.NotEmpty(t, every, "TOCK_SNAPSHOT_TO without TOCK_SNAPSHOT_EVERY exports nothing")
		require.Regexp(t, `^replicas:[1-9][0-9]*$`, env["TOCK_DURABILITY"])
		require.Equal(t, "replicas:1", env["TOCK_DURABILITY"], "each master has one replica")
	})

	t.Run("Bench", func(t *testing.T) {
		for _, name := range composeBench {
			_, path, _ := run(name)
			require.Len(t, path, 2, "service %s", name)
			require.Equal(t, "bench", path[0], "service %s runs tock bench", name)
		}
		_, _, flags := run("bench-ingest")
		api, ok := argValue(flags, "api")
		require.True(t, ok, "bench-ingest --api")
		u, err := url.Parse(api)
		require.NoError(t, err)
		require.Contains(t, composeServers, u.Hostname(), "bench-ingest loads a tock server")
		_, _, sflags := run(u.Hostname())
		addr, _ := argValue(sflags, "http")
		port, _ := listenAddrPort(t, addr)
		require.Equal(t, strconv.Itoa(port), u.Port(), "bench-ingest --api uses %s's --http port", u.Hostname())
		tok := svc("bench-ingest").Environment["TOCK_TOKEN"]
		require.Equal(t, "write", tokenScopes(svc(u.Hostname()).Environment["TOCK_TOKENS"])[tok],
			"bench-ingest's TOCK_TOKEN is a write token of %s", u.Hostname())
		require.Equal(t, "service_started", svc("bench-ingest").DependsOn[u.Hostname()])
	})

	t.Run("Dockerfile", func(t *testing.T) {
		gomod, err := os.ReadFile(filepath.Join(moduleRoot, "go.mod"))
		require.NoError(t, err)
		goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
		require.NotNil(t, goVersion, "go.mod has a go directive")
		var builder bool
		for _, st := range stages {
			if img, ok := strings.CutPrefix(st.from, "golang:"); ok {
				builder = true
				require.True(t, strings.HasPrefix(img, string(goVersion[1])), "FROM %s: go.mod wants Go %s", st.from, goVersion[1])
			}
		}
		require.True(t, builder, "a golang builder stage")
		for _, target := range []string{"tock", "worker"} {
			st := stageByName(stages, target)
			require.NotNil(t, st, "Dockerfile target %s", target)
			require.NotEmpty(t, st.user, "target %s sets USER", target)
			user, _, _ := strings.Cut(st.user, ":")
			require.NotContains(t, []string{"root", "0"}, user, "target %s runs as a non-root user", target)
			require.True(t, st.from == "scratch" || strings.Contains(st.from, "distroless/static"),
				"target %s: a static binary on scratch or distroless/static, not %s", target, st.from)
		}
		last := stages[len(stages)-1]
		require.Equal(t, "tock", last.name, "a build without --target makes the tock image")
		require.Equal(t, []string{"/tock"}, last.entrypoint)
		ignore, err := os.ReadFile(filepath.Join(moduleRoot, ".dockerignore"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(ignore), "\n") {
			line = strings.TrimSpace(line)
			require.NotContains(t, []string{"go.mod", "go.sum", "*.go", "**/*.go", "cmd", "lua", "*.lua", "**/*.lua", "*.json", "**/*.json"},
				line, ".dockerignore must keep what the build needs")
		}
	})

	t.Run("Docs", func(t *testing.T) {
		doc, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "deploy.md"))
		require.NoError(t, err)
		for name, s := range f.Services {
			require.True(t, bytes.Contains(doc, []byte("`"+name+"`")), "docs/deploy.md describes service %s", name)
			for _, p := range s.Ports {
				require.True(t, bytes.Contains(doc, []byte(strconv.Itoa(p.Published))), "docs/deploy.md names host port %d of %s", p.Published, name)
			}
		}
	})
}

func TestComposeInterpolate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                  "plain",
		"$$HOME and $${x%:*}":    "$HOME and ${x%:*}",
		"${TOKEN:-a:write,b}":    "a:write,b",
		"x${EMPTY-}y":            "xy",
		"${A:-1}${B:-2}":         "12",
		"s3://b?endpoint=http:x": "s3://b?endpoint=http:x",
	} {
		got, err := composeInterpolate(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"$HOME", "${HOME}", "${HOME:?required}", "a $ b", "${", "${1X:-d}"} {
		_, err := composeInterpolate(in)
		require.Error(t, err, in)
	}
}

func TestComposeSplit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"server --http :8080":             {"server", "--http", ":8080"},
		`sh -c 'echo "a b"'  x`:           {"sh", "-c", `echo "a b"`, "x"},
		`a "b \"c\" d" e\ f`:              {"a", `b "c" d`, "e f"},
		"  ":                              nil,
		"redis-server --save ''":          {"redis-server", "--save", ""},
		"bench fire\n  --jobs 10\t--json": {"bench", "fire", "--jobs", "10", "--json"},
	} {
		got, err := composeSplit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := composeSplit(`a "b`)
	require.Error(t, err)
}

func TestHelpFlags(t *testing.T) {
	t.Parallel()
	out := "Usage of tock bench fire:\n  -jobs int\n    \tjobs (default 100000)\n  -v\tlog errors\n" +
		"Flags:\n  --redis host:port[,host:port...]\n      address of a Redis server\n      env TOCK_REDIS, required\n" +
		"  --demo\n      -x is not a flag\n"
	require.Equal(t, map[string]bool{"jobs": true, "v": true, "redis": true, "demo": true}, helpFlags(out))
}

func TestUsageMentions(t *testing.T) {
	t.Parallel()
	usage := "Usage:\n  tock server --redis x\n  tock bench fire|throughput|memory|ingest [flags]\n"
	require.True(t, usageMentions(usage, "tock", []string{"server"}))
	require.True(t, usageMentions(usage, "tock", []string{"bench", "ingest"}))
	require.False(t, usageMentions(usage, "tock", []string{"bench", "nosuch"}))
	require.False(t, usageMentions(usage, "tock", []string{"serve"}))
	require.False(t, usageMentions(usage, "tock", []string{"bench", "fire", "now"}))
}
