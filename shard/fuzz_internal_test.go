package shard

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
)

// Fuzz tests of the decoders of what the scripts return: a damaged or unexpected reply is
// an error, never a panic, and what the scripts write reads back as written.

// packValue builds a packed job's value as create_jobs writes it (lua packed's packed_add:
// a record_encode with bucket start 0, age 0): "cr|vt|q|pr|id|due|0|dh|." then name=len:value.
func packValue(id string, due int64, fields ...string) string {
	var b strings.Builder
	b.WriteString("1764000000000||default||" + id + "|" + strconv.FormatInt(due, 10) + "|0|dh|.")
	for i := 0; i+1 < len(fields); i += 2 {
		b.WriteString(fields[i] + "=" + strconv.Itoa(len(fields[i+1])) + ":" + fields[i+1])
	}
	return b.String()
}

func FuzzParsePacked(f *testing.F) {
	f.Add("t", []byte("payload"), int64(1500), int64(2500), 3)
	f.Add("a|b=c:d", []byte("p=1:x|"), int64(0), int64(0), 0)
	f.Add("", []byte{}, int64(-1), int64(1<<40), -1)
	f.Fuzz(func(t *testing.T, typ string, payload []byte, to, vt int64, ma int) {
		v := packValue("j", 1764000000000, "t", typ, "to", strconv.FormatInt(to, 10), "vt", strconv.FormatInt(vt, 10),
			"ma", strconv.Itoa(ma), "p", string(payload))
		var c Claimed
		require.NoError(t, c.parsePacked(v))
		require.Equal(t, typ, c.Type)
		require.Equal(t, string(payload), string(c.Payload))
		require.Equal(t, time.Duration(to)*time.Millisecond, c.Timeout)
		require.Equal(t, time.Duration(vt)*time.Millisecond, c.Visibility)
		require.Equal(t, ma, c.MaxAttempts)
	})
}

func FuzzParsePackedAnyValue(f *testing.F) {
	f.Add(packValue("j", 1, "t", "x", "p", "yz"))
	f.Add("1|2|3|4|5|6|7|8|.t=9999:x")
	f.Add("||||||||.=:")
	f.Add("||||||||.t=-1:")
	f.Fuzz(func(t *testing.T, v string) {
		var c Claimed
		_ = c.parsePacked(v) // an error or a value, never a panic
	})
}

func FuzzParseRest(f *testing.F) {
	f.Add("1-abc|2|60000|30000|5|1764000000000")
	f.Add("tok|1||||")
	f.Add("|1||||")
	f.Add("a|b|c|d|e|f")
	f.Fuzz(func(t *testing.T, rest string) {
		var c Claimed
		if err := c.parseRest(rest); err == nil {
			require.NotEmpty(t, c.Token)
			require.Equal(t, strings.SplitN(rest, "|", 2)[0], c.Token)
		}
	})
}

func FuzzParseClaimRuns(f *testing.F) {
	f.Add(packValue("j", 1764000000000, "t", "x"), "", "h:1764000000001", "t", "p", "2-n|2|||", true)
	f.Add("", "", "", "", "", "", false)
	f.Add("m:1", "bad", "x", "y", "z", "|", true)
	f.Fuzz(func(t *testing.T, packed, e0, e1, e2, e3, e4 string, two bool) {
		raw := []string{e0, e1, e2, e3, e4}
		if two {
			raw = append([]string{"p:1764000000000", packed}, raw...)
		}
		now := time.UnixMilli(1764000000000)
		runs, err := parseClaimRuns(3, now, "1-n", raw)
		if err != nil {
			return
		}
		for _, c := range runs {
			require.Equal(t, ID(3), c.Shard)
			require.Equal(t, now, c.ClaimedAt)
			require.False(t, c.StartAt.Before(c.Due), "a run never starts before it is due")
		}
	})
}

func FuzzDecodeHistory(f *testing.F) {
	f.Add("1764000000000,5,10,w-1,1\n{\"d\":1764000000000,\"o\":\"failed\",\"er\":\"boom\",\"a\":2}")
	f.Add("{\"d\":0,\"o\":\"cancelled\"}")
	f.Add(",,,,")
	f.Add("1,2,3,4")
	f.Add("{")
	f.Fuzz(func(t *testing.T, h string) {
		runs, err := decodeHistory("j", h)
		if err == nil && h != "" {
			require.Len(t, runs, strings.Count(h, "\n")+1)
		}
	})
}

func FuzzDecodeHistorySucceeded(f *testing.F) {
	f.Add(int64(1764000000000), int64(3), int64(9), "w-1", 1)
	f.Add(int64(1000), int64(0), int64(0), "", 25)
	f.Fuzz(func(t *testing.T, due, start, end int64, worker string, att int) {
		if strings.ContainsAny(worker, ",\n") || due < 1 || due > 1<<50 || start < 0 || end < start || end > 1<<40 {
			t.Skip("not what hist_push writes")
		}
		h := strconv.FormatInt(due, 10) + "," + strconv.FormatInt(start, 10) + "," + strconv.FormatInt(end, 10) + "," + worker + "," + strconv.Itoa(att)
		runs, err := decodeHistory("j", h)
		require.NoError(t, err)
		require.Len(t, runs, 1)
		r := runs[0]
		require.Equal(t, job.OutcomeSucceeded, r.Outcome)
		require.Equal(t, worker, r.Worker)
		require.Equal(t, att, r.Attempt)
		require.Equal(t, time.Duration(end-start)*time.Millisecond, r.End.Sub(r.Start))
	})
}

func FuzzDecodeListCursor(f *testing.F) {
	addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	f.Add(encodeListCursor(3, "", 17))
	f.Add(encodeListCursor(0, "127.0.0.1:7002", 1<<40))
	f.Add("")
	f.Add("cHw=")
	f.Fuzz(func(t *testing.T, c string) {
		packed, node, cursor, err := decodeListCursor(c, addrs, 64)
		if err != nil {
			var fe *job.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "cursor", fe.Field)
			return
		}
		require.GreaterOrEqual(t, packed, 0)
		require.LessOrEqual(t, packed, 64)
		require.GreaterOrEqual(t, node, 0)
		require.Less(t, node, len(addrs))
		_ = cursor
	})
}

func FuzzListCursorRoundTrip(f *testing.F) {
	f.Add(5, uint64(99), false)
	f.Add(63, uint64(0), true)
	f.Fuzz(func(t *testing.T, packed int, cursor uint64, onNode bool) {
		addrs := []string{"10.0.0.1:6379", "10.0.0.2:6379"}
		if packed < 0 || packed > 63 {
			t.Skip()
		}
		addr := ""
		if onNode {
			addr = addrs[1]
		}
		p, node, cur, err := decodeListCursor(encodeListCursor(packed, addr, cursor), addrs, 64)
		require.NoError(t, err)
		require.Equal(t, cursor, cur)
		if onNode {
			require.Equal(t, 1, node)
			require.Equal(t, 64, p, "the packed jobs are done")
		} else {
			require.Equal(t, packed, p)
		}
	})
}
