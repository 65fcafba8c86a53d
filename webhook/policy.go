package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxURLLength bounds an endpoint URL: SPEC.md asks for "under 2048 characters".
const MaxURLLength = 2048

// resolveTimeout bounds the DNS look-up made by ValidateEndpointURL.
const resolveTimeout = 5 * time.Second

// Resolver looks host names up. *net.Resolver satisfies it; tests inject a
// fake that maps names to any address without touching the network.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy says which endpoints may be registered and dialled.
type Policy struct {
	// AllowLoopbackHTTP accepts loopback addresses (127.0.0.0/8, ::1), over
	// http:// as well as https://, for test-mode endpoints only (a Sender
	// and the API hold live endpoints to Strict()). It is on by default
	// only in a single-machine embedded setup (WEBHOOK_ALLOW_LOOPBACK), and
	// the production profile refuses to start with it. Every other
	// non-public range stays refused.
	AllowLoopbackHTTP bool
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
}

// Strict returns p without the loopback allowance: https to public
// addresses only. Live endpoints are always held to it.
func (p Policy) Strict() Policy {
	p.AllowLoopbackHTTP = false
	return p
}

func (p Policy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// ErrInvalidEndpointURL is wrapped by every error of ValidateEndpointURL.
var ErrInvalidEndpointURL = errors.New("invalid endpoint url")

// ErrBlockedAddress is wrapped by errors about an address that is not public
// (at registration and at dial time).
var ErrBlockedAddress = errors.New("address is not public")

// urlError is a short, user-facing reason ("must use https") that wraps
// ErrInvalidEndpointURL and, where it applies, ErrBlockedAddress.
type urlError struct {
	reason string
	cause  error
}

func (e *urlError) Error() string { return e.reason }

func (e *urlError) Is(target error) bool { return target == ErrInvalidEndpointURL }

func (e *urlError) Unwrap() error { return e.cause }

func invalidURL(reason string) error { return &urlError{reason: reason} }

// BlockedAddressError names an address the policy refuses and why.
type BlockedAddressError struct {
	// Addr is the refused address as resolved (before unmapping).
	Addr netip.Addr
	// Reason is the range it falls in, e.g. "private", "loopback".
	Reason string
}

// Error implements error.
func (e *BlockedAddressError) Error() string {
	return fmt.Sprintf("address %s is not public (%s)", e.Addr, e.Reason)
}

// Is makes errors.Is(err, ErrBlockedAddress) hold.
func (e *BlockedAddressError) Is(target error) bool { return target == ErrBlockedAddress }

// blockedPrefixes are the special-purpose ranges (RFC 6890 and friends) that
// netip's predicates do not already cover and that no webhook may reach.
var blockedPrefixes = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space"},
	{netip.MustParsePrefix("192.0.0.0/24"), "protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255 broadcast
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local nat64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001::/32"), "teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	broadcastV4 = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// CheckAddr returns nil when a may be dialled under the policy, and a
// *BlockedAddressError otherwise. IPv4 embedded in IPv6 (IPv4-mapped
// ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by the IPv4
// address it carries.
func (p Policy) CheckAddr(a netip.Addr) error {
	reason := classify(a.WithZone(""), p.AllowLoopbackHTTP)
	if reason == "" {
		return nil
	}
	return &BlockedAddressError{Addr: a, Reason: reason}
}

// classify returns "" for a dialable address, otherwise the blocked range.
func classify(a netip.Addr, allowLoopback bool) string {
	if !a.IsValid() {
		return "invalid"
	}
	if a.Is4In6() {
		if r := classify(a.Unmap(), allowLoopback); r != "" {
			return "ipv4-mapped " + r
		}
		return ""
	}
	if a.Is6() && nat64Prefix.Contains(a) {
		b := a.As16()
		// Translated by a gateway, so never our own loopback: judged strictly.
		if r := classify(netip.AddrFrom4([4]byte(b[12:16])), false); r != "" {
			return "nat64 " + r
		}
		return ""
	}
	if a.Is6() && sixToFour.Contains(a) {
		b := a.As16()
		if r := classify(netip.AddrFrom4([4]byte(b[2:6])), false); r != "" {
			return "6to4 " + r
		}
		return ""
	}
	switch {
	case a.IsLoopback():
		if allowLoopback {
			return ""
		}
		return "loopback"
	case a.IsUnspecified():
		return "unspecified"
	case a == broadcastV4:
		return "broadcast"
	case a.IsMulticast():
		return "multicast"
	case a.IsLinkLocalUnicast():
		// 169.254.0.0/16 holds the cloud metadata service 169.254.169.254.
		return "link-local"
	case a.IsPrivate():
		// RFC 1918 and fc00::/7 (which holds fd00:ec2::254, EC2's IPv6 metadata).
		return "private"
	}
	for _, b := range blockedPrefixes {
		if b.prefix.Contains(a) {
			return b.reason
		}
	}
	if !a.IsGlobalUnicast() {
		return "not global unicast"
	}
	return ""
}

// allLoopback reports whether there are addresses and all are loopback.
func allLoopback(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return false
		}
	}
	return len(addrs) > 0
}

// parseEndpointURL performs the checks that need no DNS: absolute http(s)
// URL under MaxURLLength with a host and no userinfo. It returns the host
// without brackets.
func parseEndpointURL(raw string, p Policy) (*url.URL, string, error) {
	if raw == "" {
		return nil, "", invalidURL("is required")
	}
	if len(raw) >= MaxURLLength {
		return nil, "", invalidURL(fmt.Sprintf("must be under %d characters", MaxURLLength))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", invalidURL("is not a valid URL")
	}
	if !u.IsAbs() || u.Opaque != "" {
		return nil, "", invalidURL("must be an absolute URL")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowLoopbackHTTP {
			return nil, "", invalidURL("must use https")
		}
	default:
		return nil, "", invalidURL("must use https")
	}
	if u.User != nil {
		return nil, "", invalidURL("must not contain credentials")
	}
	host := u.Hostname()
	if host == "" {
		return nil, "", invalidURL("must have a host")
	}
	if strings.Contains(host, "%") {
		return nil, "", invalidURL("must not use a zoned address")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, "", invalidURL("has an invalid port")
		}
	}
	return u, host, nil
}

// ValidateEndpointURL checks an endpoint URL at registration: absolute, under
// 2048 characters, https (http only to a loopback host when
// p.AllowLoopbackHTTP), no userinfo, and a host that resolves only to public
// addresses (loopback too when allowed). Errors are short reasons meant to be
// shown as "url: <reason>"; all wrap ErrInvalidEndpointURL, and those about a
// non-public address also wrap ErrBlockedAddress.
//
// The same checks run again at dial time (Sender), because DNS can change
// between registration and delivery.
func ValidateEndpointURL(raw string, p Policy) error {
	u, host, err := parseEndpointURL(raw, p)
	if err != nil {
		return err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		defer cancel()
		addrs, err = p.resolver().LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return invalidURL("host does not resolve")
		}
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			var blocked *BlockedAddressError
			errors.As(err, &blocked)
			return &urlError{reason: "host resolves to a non-public address (" + blocked.Reason + ")", cause: err}
		}
	}
	if u.Scheme == "http" && !allLoopback(addrs) {
		return invalidURL("must use https")
	}
	return nil
}
