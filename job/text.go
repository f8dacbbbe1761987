package job

import (
	"unicode"
	"unicode/utf8"
)

// isDotSegment reports whether id is "." or "..": a URL path cannot address such a
// segment (clients and proxies resolve it away), so no identifier may be one.
func isDotSegment(id string) bool { return id == "." || id == ".." }

// ValidateText checks a name meant to be shown as it is (a job's type, printed by the
// CLI and in logs): valid UTF-8 with no control character (C0, DEL, C1: U+009B is a
// terminal's CSI), no bidirectional formatting character (U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069), and no line or paragraph separator (U+2028, U+2029).
// Such characters would change what a reader sees. The error is a *FieldError naming
// field.
func ValidateText(field, s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validRuneAt(s, i):
			return fieldErr(field, "not valid UTF-8 at byte %d", i)
		case unicode.IsControl(r):
			return fieldErr(field, "contains the control character %U at byte %d", r, i)
		case unicode.Is(unicode.Bidi_Control, r):
			return fieldErr(field, "contains the bidirectional formatting character %U at byte %d", r, i)
		case r == '\u2028' || r == '\u2029':
			return fieldErr(field, "contains the separator %U at byte %d", r, i)
		}
	}
	return nil
}

// validRuneAt reports whether the U+FFFD decoded at byte i of s is written there (and is
// not a byte that is not UTF-8).
func validRuneAt(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 3
}
