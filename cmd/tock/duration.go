package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"regexp"
	"time"
)

// durationSyntax is the form of a Go duration (time.ParseDuration): numbers with units.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// errDurationRange says that a duration is too long for time.Duration, which
// time.ParseDuration reports as a generic "invalid duration".
var errDurationRange = fmt.Errorf("out of range: the longest duration is %s (about 292 years)",
	shortDuration(time.Duration(math.MaxInt64).Truncate(time.Second)))

// parseDurationText parses a Go duration. Its error says whether v is not a duration
// or too long for one; the caller names where v came from.
func parseDurationText(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil {
		return d, nil
	}
	if durationSyntax.MatchString(v) {
		return 0, errDurationRange
	}
	return 0, errors.New("not a duration (such as 90s or 1h30m)")
}

// durationFlag is a flag.Value of a time.Duration that says why a value does not parse.
type durationFlag struct{ d *time.Duration }

// durationVar defines a duration flag, as flag.FlagSet.DurationVar does.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := parseDurationText(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// checkDurationFlags refuses the values of the string flags names that are too long for
// a duration, before they are sent: the API's error would not say why. Other mistakes
// are left for the API, which names the field.
func checkDurationFlags(values map[string]string, names ...string) error {
	for _, name := range names {
		v, ok := values[name]
		if !ok || v == "" {
			continue
		}
		if _, err := parseDurationText(v); errors.Is(err, errDurationRange) {
			return fmt.Errorf("--%s %q: %w", name, v, err)
		}
	}
	return nil
}
