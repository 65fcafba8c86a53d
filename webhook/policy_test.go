package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// fakeResolver maps host names to addresses without any network.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	ips, ok := f[strings.ToLower(host)]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// blockedAddrs holds one or more addresses of every range that must never be
// dialled, whatever the policy.
var blockedAddrs = []string{
	"10.0.0.1", "10.255.255.254", "172.16.0.1", "172.31.255.1", "192.168.1.1", // RFC 1918
	"169.254.169.254", "169.254.0.1", // link-local, metadata
	"0.0.0.0", "0.1.2.3", // this network, unspecified
	"100.64.0.1", "100.127.255.254", // shared address space
	"224.0.0.1", "239.255.255.250", // multicast
	"255.255.255.255", "240.0.0.1", // broadcast, reserved
	"192.0.0.1", "192.0.2.1", "198.18.0.1", "198.51.100.1", "203.0.113.1", // special purpose
	"::", "fe80::1", "fc00::1", "fd00:ec2::254", "ff02::1", "ff05::1:3", // v6 special
	"::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:192.168.0.1", "::ffff:0.0.0.0", // v4-mapped
	"64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", // NAT64 of 10.0.0.1, 169.254.169.254, 127.0.0.1
	"64:ff9b:1::1", "2002:a00:1::1", "2001:db8::1", "::127.0.0.1", "2001::1", "fec0::1",
}

// loopbackAddrs are refused unless the policy allows loopback.
var loopbackAddrs = []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}

// publicAddrs are examples of addresses that pass (never dialled by tests).
var publicAddrs = []string{"93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"}

func TestCheckAddr(t *testing.T) {
	strict := Policy{}
	dev := Policy{AllowLoopbackHTTP: true}
	for _, s := range blockedAddrs {
		a := netip.MustParseAddr(s)
		for _, p := range []Policy{strict, dev} {
			err := p.CheckAddr(a)
			var be *BlockedAddressError
			if !errors.As(err, &be) || !errors.Is(err, ErrBlockedAddress) {
				t.Errorf("CheckAddr(%s, loopback=%v) = %v, want blocked", s, p.AllowLoopbackHTTP, err)
			}
		}
	}
	for _, s := range loopbackAddrs {
		a := netip.MustParseAddr(s)
		if err := strict.CheckAddr(a); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("strict CheckAddr(%s) = %v, want blocked", s, err)
		}
		if err := dev.CheckAddr(a); err != nil {
			t.Errorf("dev CheckAddr(%s) = %v, want allowed", s, err)
		}
	}
	for _, s := range publicAddrs {
		if err := strict.CheckAddr(netip.MustParseAddr(s)); err != nil {
			t.Errorf("CheckAddr(%s) = %v, want allowed", s, err)
		}
	}
}

func urlHost(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

func TestValidateEndpointURLRefusesBlockedRanges(t *testing.T) {
	res := fakeResolver{}
	for i, s := range append(append([]string{}, blockedAddrs...), loopbackAddrs...) {
		res[fmt.Sprintf("h%d.example.com", i)] = []string{s}
	}
	p := Policy{Resolver: res}
	for i, s := range append(append([]string{}, blockedAddrs...), loopbackAddrs...) {
		for _, raw := range []string{
			fmt.Sprintf("https://h%d.example.com/hook", i), // name resolving to it
			"https://" + urlHost(s) + "/hook",              // literal
		} {
			err := ValidateEndpointURL(raw, p)
			if !errors.Is(err, ErrBlockedAddress) || !errors.Is(err, ErrInvalidEndpointURL) {
				t.Errorf("ValidateEndpointURL(%s) [%s] = %v, want blocked", raw, s, err)
			}
		}
	}
}

func TestValidateEndpointURL(t *testing.T) {
	res := fakeResolver{
		"hooks.example.com": {"93.184.216.34"},
		"mixed.example.com": {"93.184.216.34", "10.0.0.7"},
		"v6.example.com":    {"2606:4700::1111"},
		"localhost":         {"127.0.0.1", "::1"},
		"internal.corp":     {"192.168.10.10"},
	}
	strict := Policy{Resolver: res}
	dev := Policy{Resolver: res, AllowLoopbackHTTP: true}
	long := "https://hooks.example.com/" + strings.Repeat("a", MaxURLLength)
	cases := []struct {
		raw    string
		p      Policy
		reason string // "" means valid
	}{
		{"https://hooks.example.com/webhooks?x=1", strict, ""},
		{"https://hooks.example.com:8443/webhooks", strict, ""},
		{"https://v6.example.com/", strict, ""},
		{"https://[2606:4700::1111]/", strict, ""},
		{"https://93.184.216.34/", strict, ""},
		{"http://hooks.example.com/", strict, "must use https"},
		{"http://hooks.example.com/", dev, "must use https"},
		{"http://127.0.0.1:8080/hook", strict, "must use https"},
		{"http://127.0.0.1:8080/hook", dev, ""},
		{"http://localhost:8080/hook", dev, ""},
		{"http://[::1]:8080/hook", dev, ""},
		{"https://localhost/hook", dev, ""},
		{"https://localhost/hook", strict, "host resolves to a non-public address (loopback)"},
		{"https://mixed.example.com/", strict, "host resolves to a non-public address (private)"},
		{"https://internal.corp/", dev, "host resolves to a non-public address (private)"},
		{"https://nowhere.example.com/", strict, "host does not resolve"},
		{"https://user:pass@hooks.example.com/", strict, "must not contain credentials"},
		{"https://user@hooks.example.com/", strict, "must not contain credentials"},
		{"/relative/path", strict, "must be an absolute URL"},
		{"hooks.example.com/path", strict, "must be an absolute URL"},
		{"ftp://hooks.example.com/", strict, "must use https"},
		{"javascript:alert(1)", strict, "must be an absolute URL"},
		{"https:///path", strict, "must have a host"},
		{"https://hooks.example.com:0/", strict, "has an invalid port"},
		{"https://1.1.1.1:99999/x", strict, "has an invalid port"},
		{"https://1.1.1.1:65536/x", strict, "has an invalid port"},
		{"https://[fe80::1%25eth0]/", strict, "must not use a zoned address"},
		{"", strict, "is required"},
		{"https://hooks.example.com/\x7f", strict, "is not a valid URL"},
		{long, strict, "must be under 2048 characters"},
	}
	for _, tc := range cases {
		err := ValidateEndpointURL(tc.raw, tc.p)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("ValidateEndpointURL(%.60q) = %v, want ok", tc.raw, err)
		case tc.reason != "" && (err == nil || err.Error() != tc.reason):
			t.Errorf("ValidateEndpointURL(%.60q) = %v, want %q", tc.raw, err, tc.reason)
		case tc.reason != "" && !errors.Is(err, ErrInvalidEndpointURL):
			t.Errorf("ValidateEndpointURL(%.60q): %v does not wrap ErrInvalidEndpointURL", tc.raw, err)
		}
	}
}

func FuzzValidateEndpointURL(f *testing.F) {
	f.Add("https://hooks.example.com/x")
	f.Add("http://[::ffff:127.0.0.1]:80/")
	p := Policy{Resolver: fakeResolver{"hooks.example.com": {"93.184.216.34"}}}
	f.Fuzz(func(t *testing.T, raw string) {
		_ = ValidateEndpointURL(raw, p)
	})
}
