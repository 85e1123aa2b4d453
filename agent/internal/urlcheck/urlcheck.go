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
	"syscall"
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
	// AllowUserinfo accepts user:password@ in a URL read from the
	// environment or a secret store, where it is as secret as the rest.
	AllowUserinfo bool
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
	if u.User != nil && !r.AllowUserinfo {
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
	if MetadataHost(host) {
		return errors.New("points at the instance metadata service")
	}
	if loopback && r.DenyLoopback {
		return errors.New("points at this instance (loopback)")
	}
	if r.Self != "" && isSelf(host, port(u), r.Self) {
		return errors.New("points at the agent's own admin address")
	}
	return nil
}

// metadataNames are the DNS names of the instance metadata services the
// agent can run beside: EC2's (instance-data, with and without its
// domain), GCE's (metadata.google.internal, and the bare "metadata" its
// resolver completes). Each resolves to a link-local address only through
// the platform's resolver, so an address check alone misses them.
var metadataNames = []string{"instance-data", "instance-data.ec2.internal", "metadata", "metadata.google.internal"}

// MetadataHost reports whether host (a DNS name, any case, with or
// without its final dot) names an instance metadata service.
func MetadataHost(host string) bool {
	h := strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	for _, m := range metadataNames {
		if strings.EqualFold(h, m) {
			return true
		}
	}
	return false
}

// isSelf reports whether host:port reaches the admin listener at self: the
// same port on a loopback host, or on self's own host when it listens on
// one address.
func isSelf(host, port, self string) bool {
	selfHost, selfPort, err := net.SplitHostPort(self)
	if err != nil || port != selfPort {
		return false
	}
	if isLoopback(host) {
		return true
	}
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	sh := strings.ToLower(strings.TrimSuffix(selfHost, "."))
	if h == sh {
		return true
	}
	a, aerr := netip.ParseAddr(h)
	b, berr := netip.ParseAddr(sh)
	return aerr == nil && berr == nil && a.Unmap() == b.Unmap()
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

// ErrDialRefused is the error of a connection DialControl refuses.
var ErrDialRefused = errors.New("urlcheck: the address is the metadata service, link-local, unspecified, multicast or the agent's own admin listener")

// DialControl is a net.Dialer Control that applies Check's address rules
// to the address a connection is about to reach, after DNS: a name of
// anyone's choosing that resolves to the metadata service, a link-local
// address or the admin listener at self (host:port; "" for none) is
// refused there, which no check of the URL as written can do. Behind a
// proxy it sees the proxy's address only.
func DialControl(self string) func(network, address string, c syscall.RawConn) error {
	_, selfPort, _ := net.SplitHostPort(self)
	return func(_, address string, _ syscall.RawConn) error {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil
		}
		ip = ip.Unmap()
		for _, m := range metadata {
			if ip == m {
				return ErrDialRefused
			}
		}
		if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
			return ErrDialRefused
		}
		if selfPort != "" && isSelf(ip.String(), port, self) {
			return ErrDialRefused
		}
		return nil
	}
}
