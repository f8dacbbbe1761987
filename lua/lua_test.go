package lua

import (
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestHeaders(t *testing.T) {
	t.Parallel()
	s, err := Load()
	require.NoError(t, err)
	require.Len(t, Names(), 27)
	for _, name := range Names() {
		raw, err := files.ReadFile(name + ".lua")
		require.NoError(t, err)
		src := string(raw)
		require.True(t, strings.HasPrefix(src, "-- "+name+": "), "%s: header must start with a one-line summary", name)
		require.Contains(t, src, "Returns:", name)
		keys, err := DeclaredKeys(name)
		require.NoError(t, err)
		require.Positive(t, keys, name)
		// KEYS[1..n] are declared in order, and no undeclared KEYS[i] is used.
		for i := 1; i <= keys; i++ {
			require.Contains(t, src, "-- KEYS["+itoa(i)+"] ", name)
		}
		for _, m := range regexp.MustCompile(`KEYS\[(\d+)\]`).FindAllStringSubmatch(src, -1) {
			require.LessOrEqual(t, atoi(m[1]), keys, "%s uses KEYS[%s] but declares %d", name, m[1], keys)
		}
		require.Contains(t, src, "ARGV[1]", name)
		// Only cjson, string and table: miniredis lacks cmsgpack, bit and struct.
		for _, lib := range []string{"cmsgpack", "bit.", "struct."} {
			require.NotContains(t, src, lib, name)
		}
	}
	require.False(t, includeRE.MatchString(s.CreateJobs.Src), "includes are expanded")
	require.Len(t, s.CreateJobs.SHA, 40)
}

func TestInclude_Circular(t *testing.T) {
	t.Parallel()
	_, err := expand(fstest.MapFS{
		"a.lua":         {Data: []byte("--- @include \"x\"\n")},
		"include/x.lua": {Data: []byte("-- x\n")},
	}, "a.lua")
	require.NoError(t, err)
	_, err = expand(fstest.MapFS{
		"a.lua":         {Data: []byte("--- @include \"x\"\n")},
		"include/x.lua": {Data: []byte("--- @include \"y\"\n")},
		"include/y.lua": {Data: []byte("--- @include \"x\"\n")},
	}, "a.lua")
	require.ErrorContains(t, err, "circular include")
}

// An include keeps only the declarations its includer uses, directly or through other
// kept ones, each with the comment right above it; its header stays.
func TestInclude_KeepsOnlyWhatIsUsed(t *testing.T) {
	t.Parallel()
	inc := `-- lib: helpers
local cache = {}

-- a uses b
local function a(x)
  return b(x) + 1
end

-- b reads the cache
local function b(x)
  return cache[x] or 0
end

-- c is unused
local function c()
  return 3
end
local d, e = 1, 2
local u
local v -- unused
local t = {
  k = 1,
}
`
	out, err := expand(fstest.MapFS{
		"s.lua":           {Data: []byte("--- @include \"lib\"\nu = 1\nreturn a(1) + e + t.k + u\n")},
		"include/lib.lua": {Data: []byte(inc)},
	}, "s.lua")
	require.NoError(t, err)
	for _, want := range []string{"-- lib: helpers", "local cache = {}", "-- a uses b", "local function a(x)",
		"-- b reads the cache", "local function b(x)", "local d, e = 1, 2", "local u\n", "local t = {\n  k = 1,\n}", "return a(1) + e + t.k + u"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "c is unused")
	require.NotContains(t, out, "local function c")
	require.NotContains(t, out, "local v")

	// The real scripts: the claim defines no history helper, the ack does.
	s, err := Load()
	require.NoError(t, err)
	require.NotContains(t, s.ClaimRuns.Src, "local function hist_push")
	require.Contains(t, s.FinishRuns.Src, "local function hist_push")
}

func itoa(i int) string { return string(rune('0' + i)) }
func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// The library holds every script once, as a function named by its Fn, and the include
// once; its name and the functions' names carry the same hash of its source.
func TestLibrary(t *testing.T) {
	t.Parallel()
	s, err := Load()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s.Library, "#!lua name="+s.LibraryName+"\n"), "shebang names the library")
	require.Regexp(t, `^tock_[0-9a-f]{12}$`, s.LibraryName)
	tag := strings.TrimPrefix(s.LibraryName, "tock_")
	seen := map[string]bool{}
	for _, name := range Names() {
		fn := name + "_" + tag
		require.False(t, seen[fn])
		seen[fn] = true
		require.Equal(t, 1, strings.Count(s.Library, "redis.register_function('"+fn+"', f_"+name+")"), name)
		require.Equal(t, 1, strings.Count(s.Library, "local function f_"+name+"(KEYS, ARGV)\nreset_state()\n"), name)
	}
	require.Equal(t, s.ClaimRuns.Fn, "claim_runs_"+tag)
	require.Equal(t, 1, strings.Count(s.Library, "local function reset_state()"), "the include comes once")
	require.False(t, includeRE.MatchString(s.Library))
	again, err := Load()
	require.NoError(t, err)
	require.Equal(t, s.Library, again.Library, "the library is the same on every load")
}
