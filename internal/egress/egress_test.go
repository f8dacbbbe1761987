package egress

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPolicy_CheckURL(t *testing.T) {
	t.Parallel()
	open, err := Parse(nil)
	require.NoError(t, err)
	lo, err := Parse([]string{"127.0.0.0/8", "hooks.example.com", "*.corp.example"})
	require.NoError(t, err)
	for _, tc := range []struct {
		p   *Policy
		url string
		ok  bool
	}{
		{open, "https://example.com/x", true},
		{open, "http://127.0.0.1:8080/x", false},
		{open, "http://[::1]/x", false},
		{open, "http://localhost/x", false},
		{open, "http://10.1.2.3/x", false},
		{open, "http://192.168.0.1/x", false},
		{open, "http://169.254.169.254/latest", false},
		{open, "http://[fe80::1]/x", false},
		{open, "http://[::ffff:127.0.0.1]/x", false},
		{open, "http://100.64.0.1/x", false},
		{open, "http://0.0.0.0/x", false},
		{open, "http://8.8.8.8/x", true},
		{lo, "http://127.0.0.1:9/x", true},
		{lo, "http://localhost:9/x", true},
		{lo, "https://hooks.example.com/x", true},
		{lo, "https://a.corp.example/x", true},
		{lo, "http://10.0.0.1/x", false},
		{lo, "http://8.8.8.8/x", false},
	} {
		err := tc.p.CheckURL(tc.url)
		if tc.ok {
			require.NoError(t, err, tc.url)
		} else {
			var re *RefusedError
			require.ErrorAs(t, err, &re, tc.url)
		}
	}
	_, err = Parse([]string{"10.0.0.0/33"})
	require.Error(t, err)
}

// A name that resolves to loopback is refused when dialled, though the name is allowed.
func TestPolicy_DialRefusesResolvedLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p, err := Parse([]string{"sink.test"})
	require.NoError(t, err)
	p.LookupFunc = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	require.NoError(t, p.CheckURL("http://sink.test:"+port+"/"))
	_, err = p.DialContext(&net.Dialer{})(context.Background(), "tcp", "sink.test:"+port)
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	require.Contains(t, err.Error(), "loopback")

	// Allowed explicitly, it dials.
	p2, err := Parse([]string{"sink.test", "127.0.0.1"})
	require.NoError(t, err)
	p2.LookupFunc = p.LookupFunc
	c, err := p2.DialContext(&net.Dialer{})(context.Background(), "tcp", "sink.test:"+port)
	require.NoError(t, err)
	c.Close()
}
