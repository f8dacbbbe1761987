package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Every command follows the same conventions: --help or -h prints the command's help to
// stdout and exits 0; a command line that cannot run (an unknown command or flag, a
// missing or extra argument, an invalid setting) prints the error and where the help is
// to stderr and exits 2; an error while running exits 1.

// usageError is a command line that cannot run. execute prints it with a pointer to the
// help of cmd (or with usage, when set) and exits with status 2.
type usageError struct {
	cmd   string // the command whose --help to point to: "tock jobs ls"
	err   error
	usage string // printed after the error instead of the pointer, when set
}

func (e *usageError) Error() string { return e.err.Error() }

func (e *usageError) Unwrap() error { return e.err }

// usageErrorf returns a *usageError of command cmd ("tock jobs ls").
func usageErrorf(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// execute runs tock with args, prints an error the way its kind asks, and returns the
// exit status: 0 for success and help, 2 for a usage error, 1 for any other error.
func execute(ctx context.Context, args []string, c *cli) int {
	if len(args) == 0 {
		fmt.Fprint(c.errOut, usage)
		return 2
	}
	err := run(ctx, args, c)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(c.errOut, "tock: %s\n", err)
		switch {
		case ue.usage != "":
			fmt.Fprintf(c.errOut, "\n%s", ue.usage)
		case !strings.Contains(err.Error(), ue.cmd+" --help"):
			fmt.Fprintf(c.errOut, "Run '%s --help' for usage.\n", ue.cmd)
		}
		return 2
	default:
		fmt.Fprintln(c.errOut, "tock:", err)
		return 1
	}
}

// commandHelp is what a command's --help says.
type commandHelp struct {
	usage string // the command line after "Usage: ", e.g. "tock jobs get ID [flags]"
	about string // what the command does; wrapped to 88 columns
}

// newFlagSet returns the flag set of command name ("tock jobs ls"). It prints nothing
// itself: parseFlags prints the help, and errors go back to execute.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// flagParseError turns an error of fs.Parse into what the command returns:
// flag.ErrHelp once the help is printed to out, a *usageError otherwise.
func flagParseError(err error, out io.Writer, h commandHelp, fs *flag.FlagSet) error {
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(out, h, fs)
		return flag.ErrHelp
	}
	return &usageError{cmd: fs.Name(),
		err: fmt.Errorf("%s: %w (%s --help lists the flags)", strings.TrimPrefix(fs.Name(), "tock "), flagValueError(err), fs.Name())}
}

// flagValueErrorRE matches package flag's error for a value that its flag refused.
var flagValueErrorRE = regexp.MustCompile(`^invalid value (".*") for flag -(\S+): (.*)$`)

// flagValueError rewords package flag's `invalid value "x" for flag -name: why` as
// `--name "x": why`, the form of every other error about a setting.
func flagValueError(err error) error {
	m := flagValueErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	why := m[3]
	if why == "parse error" {
		why = "not valid"
	}
	return fmt.Errorf("--%s %s: %s", m[2], m[1], why)
}

// printCommandHelp prints a command's help: its usage, what it does, and its flags.
func printCommandHelp(w io.Writer, h commandHelp, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n", h.usage)
	if h.about != "" {
		fmt.Fprintf(w, "\n%s\n", wrap(h.about, 88, ""))
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs, nil)
	}
}

// printFlags prints the flags of fs but those skip reports, one a line with its argument,
// then its description and default, indented.
func printFlags(w io.Writer, fs *flag.FlagSet, skip func(*flag.Flag) bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if skip != nil && skip(f) {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(durationFlag); ok && arg == "value" {
			arg = "duration"
		}
		if arg == "value" {
			arg = ""
		}
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  %s\n%s\n", strings.TrimSpace("--"+f.Name+" "+arg), wrap(usage, 88, "      "))
	})
}

var versionHelp = commandHelp{"tock version",
	"Print the version of tock's module, the VCS commit it was built from (when it was built from a " +
		"checkout with VCS stamping), the Go version and the platform. tock --version does the same."}

// runVersion runs tock version.
func runVersion(args []string, c *cli) error {
	fs := newFlagSet("tock version")
	if err := fs.Parse(args); err != nil {
		return flagParseError(err, c.out, versionHelp, fs)
	}
	if fs.NArg() > 0 {
		return usageErrorf("tock version", "version: unexpected argument %q", fs.Arg(0))
	}
	v, settings := "", map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	_, err := fmt.Fprint(c.out, versionText(v, settings, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH))
	return err
}

// versionText is tock version's line: the module version ("(devel)" when unknown), the
// commit, its time and whether the checkout was modified, from the build settings
// (debug.BuildInfo.Settings), then the Go version and platform.
func versionText(version string, settings map[string]string, goVersion, platform string) string {
	if version == "" {
		version = "(devel)"
	}
	var details []string
	if rev := settings["vcs.revision"]; rev != "" {
		details = append(details, "commit "+rev[:min(len(rev), 12)])
	}
	if t := settings["vcs.time"]; t != "" {
		details = append(details, t)
	}
	if settings["vcs.modified"] == "true" {
		details = append(details, "modified")
	}
	s := "tock " + version
	if len(details) > 0 {
		s += " (" + strings.Join(details, ", ") + ")"
	}
	return s + " " + goVersion + " " + platform + "\n"
}
