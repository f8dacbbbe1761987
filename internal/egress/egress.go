// Package egress is the outbound policy of push delivery: which hosts and addresses a
// job's target may reach. The API checks a target's URL at create (Policy.CheckURL), and
// the executor checks every address it dials after DNS resolution (Policy.DialContext),
// so a name that resolves to a private address is refused too.
//
// With an empty allow list any public address may be reached. With entries, only host
// names that a host entry names ("hooks.example.com", or "*.example.com" for its
// subdomains) and literal addresses inside a CIDR entry ("203.0.113.0/24"). Loopback, private (RFC 1918, RFC
// 4193), link-local, CGNAT, unspecified and multicast addresses are refused unless a CIDR
// entry contains them: a host entry permits a name, never its private addresses.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Policy is an egress allow list. It is read-only after Parse and safe for concurrent use.
type Policy struct {
	hosts    []string // lower-case; "*.x" matches subdomains of x
	prefixes []netip.Prefix
	// LookupFunc resolves a host name; nil means net.DefaultResolver (tests set it).
	LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Parse builds a policy from allow entries: host names, "*.domain", IP addresses or CIDRs.
func Parse(allow []string) (*Policy, error) {
	p := &Policy{}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return nil, errors.New("egress: an empty allow entry")
		case strings.Contains(a, "/"):
			pr, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("egress: allow %q: %w", a, err)
			}
			p.prefixes = append(p.prefixes, pr.Masked())
		default:
			if ip, err := netip.ParseAddr(strings.Trim(a, "[]")); err == nil {
				p.prefixes = append(p.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			p.hosts = append(p.hosts, strings.ToLower(strings.TrimSuffix(a, ".")))
		}
	}
	return p, nil
}

// RefusedError says why a target may not be reached.
type RefusedError struct {
	Host   string
	Reason string
}

func (e *RefusedError) Error() string { return "egress to " + e.Host + " refused: " + e.Reason }

// special reports whether an address is loopback, private, link-local or otherwise not
// public, with its kind.
func special(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsPrivate() || cgnat.Contains(a):
		return "a private address"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsUnspecified():
		return "an unspecified address"
	case a.IsMulticast() || a.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	return ""
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func (p *Policy) inPrefixes(a netip.Addr) bool {
	a = a.Unmap()
	for _, pr := range p.prefixes {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

func (p *Policy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.hosts {
		if h == host || strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) {
			return true
		}
	}
	return false
}

// CheckAddr checks one address that host resolved to (host is the address itself for
// a literal).
func (p *Policy) CheckAddr(host string, a netip.Addr) error {
	if p.inPrefixes(a) {
		return nil
	}
	if kind := special(a); kind != "" {
		return &RefusedError{Host: host, Reason: fmt.Sprintf("%s is %s; allow it explicitly with a CIDR entry of --push-allow", a, kind)}
	}
	if len(p.hosts)+len(p.prefixes) > 0 && !p.hostAllowed(host) {
		return &RefusedError{Host: host, Reason: fmt.Sprintf("%s is not in the allow list (--push-allow)", a)}
	}
	return nil
}

// CheckHost checks a host name or literal address as a target names it, before any DNS
// lookup: a literal address by CheckAddr; a name must match a host entry when the allow
// list has entries (CIDR entries match addresses, not names), and "localhost" is loopback.
func (p *Policy) CheckHost(host string) error {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.CheckAddr(host, a)
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		if p.inPrefixes(netip.MustParseAddr("127.0.0.1")) {
			return nil
		}
		return &RefusedError{Host: host, Reason: "localhost is a loopback address; allow 127.0.0.0/8 explicitly with --push-allow"}
	}
	if len(p.hosts)+len(p.prefixes) > 0 && !p.hostAllowed(h) {
		return &RefusedError{Host: host, Reason: "the host is not in the allow list (--push-allow)"}
	}
	return nil
}

// CheckURL checks a target URL's host (see CheckHost).
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return p.CheckHost(u.Hostname())
}

// DialContext resolves addr's host, checks every address it gives against the policy
// and dials the first that passes; an address refused is never dialled. It is a
// net/http Transport's DialContext.
func (p *Policy) DialContext(dialer *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if err := p.CheckHost(host); err != nil {
			return nil, err
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if addrs, err = p.lookup(ctx, host); err != nil {
			return nil, err
		}
		var firstErr error
		for _, a := range addrs {
			if err := p.CheckAddr(host, a); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			c, err := dialer.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
			if err == nil {
				return c, nil
			}
			firstErr = err
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("egress: %s resolved to no address", host)
		}
		return nil, firstErr
	}
}

func (p *Policy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.LookupFunc != nil {
		return p.LookupFunc(ctx, host)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}
