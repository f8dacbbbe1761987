package job

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCron_PreviewDST(t *testing.T) {
	t.Parallel()
	type want struct{ at, dst, note string }
	tests := []struct {
		name, expr, tz, after string
		n                     int
		want                  []want
	}{
		{
			name: "SpringGapMovesFixedHour", expr: "30 2 * * *", tz: "America/New_York",
			after: "2027-03-12T12:00:00-05:00", n: 4,
			want: []want{
				{"2027-03-13T02:30:00-05:00", "", ""},
				{"2027-03-14T03:00:00-04:00", DSTMoved, "02:30 does not exist on 2027-03-14 (clocks jump from 02:00 to 03:00): fires at 03:00 EDT"},
				{"2027-03-15T02:30:00-04:00", "", ""},
				{"2027-03-16T02:30:00-04:00", "", ""},
			},
		},
		{
			name: "FallBackFixedHourFiresFirstPassOnly", expr: "30 1 * * *", tz: "America/New_York",
			after: "2027-11-06T12:00:00-04:00", n: 2,
			want: []want{
				{"2027-11-07T01:30:00-04:00", DSTRepeatSkipped, "01:30 occurs twice on 2027-11-07 (clocks go back from 02:00 to 01:00): fires on the first pass (EDT) only; the repeat at 01:30 EST is skipped"},
				{"2027-11-08T01:30:00-05:00", "", ""},
			},
		},
		{
			name: "FallBackWildHourFiresBoth", expr: "30 * * * *", tz: "America/New_York",
			after: "2027-11-07T00:45:00-04:00", n: 3,
			want: []want{
				{"2027-11-07T01:30:00-04:00", DSTRepeated, "01:30 occurs twice on 2027-11-07 (clocks go back from 02:00 to 01:00): fires in both passes, this is the first (EDT)"},
				{"2027-11-07T01:30:00-05:00", DSTRepeated, "01:30 occurs twice on 2027-11-07 (clocks went back from 02:00 to 01:00): fires in both passes, this is the second (EST)"},
				{"2027-11-07T02:30:00-05:00", "", ""},
			},
		},
		{
			name: "SpringGapWildHourSkips", expr: "30 * * * *", tz: "America/New_York",
			after: "2027-03-14T01:00:00-05:00", n: 2,
			want: []want{
				{"2027-03-14T01:30:00-05:00", "", ""},
				{"2027-03-14T03:30:00-04:00", DSTGapSkipped, "02:00 to 03:00 did not exist on 2027-03-14 (clocks jumped forward): the occurrences from 02:30 in it did not fire"},
			},
		},
		{
			name: "UTCHasNoNotes", expr: "0 2 * * *", tz: "",
			after: "2027-03-13T00:00:00Z", n: 2,
			want: []want{{"2027-03-13T02:00:00Z", "", ""}, {"2027-03-14T02:00:00Z", "", ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustCron(t, tt.expr, tt.tz)
			got := c.Preview(mustTime(t, tt.after), tt.n)
			require.Len(t, got, len(tt.want))
			for i, w := range tt.want {
				require.Equal(t, mustTime(t, w.at).Unix(), got[i].At.Unix(), "fire %d: %s", i, got[i].At)
				require.Equal(t, w.dst, got[i].DST, "fire %d", i)
				require.Equal(t, w.note, got[i].Note, "fire %d", i)
			}
		})
	}
}

func TestCron_PreviewBounds(t *testing.T) {
	t.Parallel()
	c := mustCron(t, "* * * * *", "Europe/Paris")
	after := mustTime(t, "2027-01-01T00:00:00Z")
	require.Len(t, c.Preview(after, 0), 1)
	require.Len(t, c.Preview(after, MaxPreview+50), MaxPreview)
}
