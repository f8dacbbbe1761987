package redistest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockedHere blocks on ch: a goroutine of the project's code for the digest to find.
func blockedHere(ch chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	<-ch
}

// A hung test binary reports, last, which of its goroutines in the project's code wait
// where and for which test; identical ones are counted, others' stacks are left out of
// the digest.
func TestWatchdog_ReportsWhereTheProjectWaits(t *testing.T) {
	ch := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go blockedHere(ch, &wg)
	}
	t.Cleanup(func() { close(ch); wg.Wait() })
	time.Sleep(20 * time.Millisecond) // both are blocked by now

	var out bytes.Buffer
	exited := make(chan int, 1)
	stop := armWatchdog(10*time.Millisecond, &out, func(code int) { exited <- code })
	defer stop()
	select {
	case code := <-exited:
		require.Equal(t, 2, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not fire")
	}

	report := out.String()
	require.Contains(t, report, "every goroutine:")
	_, digest, ok := strings.Cut(report, "HANG after 10ms")
	require.True(t, ok, report)
	lines := strings.Split(strings.TrimSpace(digest), "\n")
	require.Contains(t, lines[len(lines)-1], "HANG after 10ms", "the report ends with its verdict")
	lines = lines[1 : len(lines)-1]
	var found bool
	for _, l := range lines {
		require.NotContains(t, l, "writeHangReport", "the watchdog leaves itself out")
		if strings.Contains(l, "internal/redistest.blockedHere watchdog_test.go:") {
			require.Contains(t, l, "[chan receive]")
			require.Contains(t, l, "(×2)")
			found = true
		}
	}
	require.True(t, found, digest)
	// The test goroutine itself waits in this test.
	require.Contains(t, digest, "in internal/redistest.TestWatchdog_ReportsWhereTheProjectWaits")
}

// A watchdog stopped in time stays silent.
func TestWatchdog_StoppedStaysSilent(t *testing.T) {
	var out bytes.Buffer
	exited := make(chan int, 1)
	stop := armWatchdog(50*time.Millisecond, &out, func(code int) { exited <- code })
	stop()
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, exited)
	require.Zero(t, out.Len())
}

// Waits of minutes sort last, where a log's end shows them: the goroutines that hang,
// not the ones that just woke.
func TestHangDigest_LongestWaitsFirst(t *testing.T) {
	dump := []byte(`goroutine 1 [running]:
github.com/tockhq/tock/worker.(*Worker).report(0xc0000)
	/w/worker/worker.go:1040 +0x1

goroutine 7 [chan receive, 15 minutes]:
github.com/tockhq/tock/worker.(*Worker).Stop(0xc0000, {0x1, 0x2})
	/w/worker/worker.go:1300 +0x1
github.com/tockhq/tock/worker.TestWorker_Metrics.func1(0xc0001)
	/w/worker/metrics_test.go:134 +0x2
created by testing.(*T).Run in goroutine 6
	/usr/local/go/src/testing/testing.go:1997 +0x3

goroutine 9 [IO wait]:
internal/poll.runtime_pollWait(0x1)
	/usr/local/go/src/runtime/netpoll.go:351 +0x1
`)
	require.Equal(t, []string{
		"[running] worker.(*Worker).report worker.go:1040",
		"[chan receive, 15 minutes] worker.(*Worker).Stop worker.go:1300 in worker.TestWorker_Metrics.func1",
	}, hangDigest(dump))
}
