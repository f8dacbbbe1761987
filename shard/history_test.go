package shard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
)

func TestDecodeHistory_CompactAndJSONEntries(t *testing.T) {
	h := "1700000000000,250,300,vm-1,2\n" +
		`{"d":1699999999000,"s":1699999999100,"e":1699999999200,"w":"vm-1","a":1,"o":"failed","er":"boom","r":1700000000000}` + "\n" +
		"1699999998000,,5,,1"
	runs, err := decodeHistory("j", h)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	require.Equal(t, job.Run{Due: time.UnixMilli(1700000000000), Start: time.UnixMilli(1700000000250),
		End: time.UnixMilli(1700000000300), Worker: "vm-1", Attempt: 2, Outcome: job.OutcomeSucceeded}, stripMono(runs[0]))
	require.Equal(t, job.Outcome("failed"), runs[1].Outcome)
	require.Equal(t, "boom", runs[1].Error)
	require.Equal(t, ms(0), runs[2].Start, "a run without a start time keeps it empty")
	require.Equal(t, time.UnixMilli(1699999998005), runs[2].End)

	for _, bad := range []string{"1,2,3", "x,1,2,w,1", "1,2,3,w,1,extra", "{broken"} {
		_, err := decodeHistory("j", bad)
		require.Error(t, err, bad)
		require.ErrorContains(t, err, `runs of job "j"`)
	}
}

func stripMono(r job.Run) job.Run {
	r.Due, r.Start, r.End = r.Due.Round(0), r.Start.Round(0), r.End.Round(0)
	return r
}

func TestPayloadChunks_RoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 100, 511, 512, 513, 5000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*7 + 3)
		}
		def := appendPayload(nil, string(p))
		m := map[string]string{}
		for k := 0; k < len(def); k += 2 {
			if n <= payloadChunk*payloadChunks {
				require.LessOrEqual(t, len(def[k+1]), payloadChunk, "size %d: chunk %s", n, def[k])
			}
			m[def[k]] = def[k+1]
		}
		require.Equal(t, string(p), string(joinPayload(m)), "size %d", n)
	}
}

func TestParseReady(t *testing.T) {
	for msg, want := range map[string]struct {
		id ID
		at int64
		ok bool
	}{
		"3 1700000000123456": {3, 1700000000123456, true},
		"3 1700000000123":    {3, 1700000000123000, true}, // milliseconds, from an older publisher
		"3":                  {3, 0, true},                // an older publisher: no time
		"4 1":                {0, 0, false},
		"-1 5":               {0, 0, false},
		"x 5":                {0, 0, false},
		"2 soon":             {0, 0, false},
		"2 -5":               {0, 0, false},
	} {
		id, at, ok := ParseReady(msg, 4)
		require.Equal(t, want.ok, ok, msg)
		if ok {
			require.Equal(t, want.id, id, msg)
			require.Equal(t, want.at, at, msg)
		}
	}
}
