// Package urlcheck holds the rules an outbound URL from the configuration
// must follow so that it cannot be turned against the fleet: the instance
// metadata service, link-local addresses and credentials in the URL are
// refused; plain http only where the caller allows it.
package urlcheck

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// ErrHTTP is the problem of a plain http URL where the Rules do not allow
// one; a caller with an opt-in key names it beside this.
var ErrHTTP = errors.New("http is not allowed: use https")

// Rules say what a caller accepts beyond https to a remote host.
type Rules struct {
	// AllowHTTP accepts http:// to any host.
	AllowHTTP bool
	// AllowHTTPLoopback accepts http:// to a loopback host (a local model
	// server), https being required elsewhere.
	AllowHTTPLoopback bool
	// DenyLoopback refuses loopback hosts whatever the scheme.
	DenyLoopback bool
	// Self is the agent's own admin address (host:port); a URL to it is
	// refused ("" = none).
	Self string
}

// metadata are the instance metadata service's addresses (IPv4 and the
// Nitro IPv6 one); link-local covers the IPv4 one too.
var metadata = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

// Check applies r to raw. Its error never contains the URL: it may come
// from a secret.
func Check(raw string, r Rules) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("has no host")
	}
	if u.User != nil {
		return errors.New("holds credentials (user:password@): put them in the environment")
	}
	loopback := isLoopback(host)
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (r.AllowHTTP || (r.AllowHTTPLoopback && loopback)):
	case u.Scheme == "http":
		return ErrHTTP
	default:
		return errors.New("must be an https URL")
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		for _, m := range metadata {
			if ip == m {
				return errors.New("points at the instance metadata service")
			}
		}
		if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
			return errors.New("points at a link-local, unspecified or multicast address")
		}
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "instance-data") || strings.EqualFold(host, "instance-data.ec2.internal") {
		return errors.New("points at the instance metadata service")
	}
	if loopback && r.DenyLoopback {
		return errors.New("points at this instance (loopback)")
	}
	if r.Self != "" && loopback {
		if _, selfPort, err := net.SplitHostPort(r.Self); err == nil && port(u) == selfPort {
			return errors.New("points at the agent's own admin address")
		}
	}
	return nil
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

func isLoopback(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}
