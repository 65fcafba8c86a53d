package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// loginEngine mounts lim and a sign-in route that checks the account first
// and records failures per address and account, as the API's login does.
func loginEngine(t *testing.T, lim *Limiter) *gin.Engine {
	e := newEngine(t, lim, []string{"127.0.0.1"})
	e.POST("/api/auth/login", lim.Middleware(), func(c *gin.Context) {
		account := c.Query("email")
		if !lim.AllowAccount(c, account) {
			return
		}
		if c.Query("password") != "right" {
			if err := lim.RecordLoginFailure(c.Request.Context(), c.ClientIP(), account); err != nil {
				t.Errorf("RecordLoginFailure: %v", err)
			}
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"status": "error", "message": "invalid email or password", "code": "UNAUTHORIZED"})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "success"})
	})
	return e
}

// TestAccountFailuresAcrossAddresses: ten wrong passwords for one account,
// each from another address (none of them blocked on its own), block the
// account from every address, even with the right password, until the first
// failure leaves the window; other accounts and the addresses themselves are
// not blocked; the account is matched case-insensitively.
func TestAccountFailuresAcrossAddresses(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		clock := newClock()
		lim := New(open(), testConfig(), WithClock(clock.Now))
		srv := server(t, loginEngine(t, lim))
		login := func(ip, email, password string) response {
			return call(t, srv, "POST", "/api/auth/login?email="+email+"&password="+password, ip)
		}
		for i := 0; i < 10; i++ {
			if r := login(fmt.Sprintf("198.51.100.%d", i+1), "Ann@Shop.example", "guess"); r.code != 401 {
				t.Fatalf("guess %d: %d %s", i+1, r.code, r.body)
			}
			clock.Advance(time.Second)
		}
		r := login("203.0.113.50", "ann@shop.example", "right")
		want := `{"status":"error","message":"too many failed sign-in attempts for this account; try again in 290 seconds","code":"UNAUTHORIZED"}`
		if r.code != 401 || r.body != want {
			t.Fatalf("blocked account, right password, fresh address: %d %s\nwant 401 %s", r.code, r.body, want)
		}
		if r.header.Get("Retry-After") != "290" || r.header.Get("X-RateLimit-Limit") != "10" ||
			r.header.Get("X-RateLimit-Remaining") != "0" ||
			r.header.Get("X-RateLimit-Reset") != strconv.FormatInt(t0.Add(5*time.Minute).UnixMilli(), 10) {
			t.Errorf("blocked account headers: %v", r.header)
		}
		if r := login("203.0.113.50", "bob@shop.example", "right"); r.code != 200 {
			t.Errorf("another account from the same address: %d %s", r.code, r.body)
		}
		if r := call(t, srv, "GET", "/api/protected", "198.51.100.1", "Authorization", goodKey); r.code != 200 {
			t.Errorf("an address with one failure is not blocked: %d", r.code)
		}
		// Refused attempts while blocked do not extend the block.
		for i := 0; i < 5; i++ {
			login("203.0.113.60", "ann@shop.example", "guess")
		}
		clock.Set(t0.Add(5 * time.Minute))
		if r := login("203.0.113.50", "ann@shop.example", "right"); r.code != 200 {
			t.Fatalf("after the first failure left the window: %d %s", r.code, r.body)
		}
	})
}

// TestAccountLimitOff: without an account tier, or for an exempt loopback
// caller, sign-ins are limited per address only.
func TestAccountLimitOff(t *testing.T) {
	cfg := testConfig()
	cfg.AccountFailures = Tier{}
	lim := New(NewMemoryStore(), cfg, WithClock(newClock().Now))
	srv := server(t, loginEngine(t, lim))
	for i := 0; i < 12; i++ {
		call(t, srv, "POST", "/api/auth/login?email=a@b.example&password=guess", fmt.Sprintf("198.51.100.%d", i+1))
	}
	if r := call(t, srv, "POST", "/api/auth/login?email=a@b.example&password=right", "203.0.113.1"); r.code != 200 {
		t.Fatalf("no account tier: %d %s", r.code, r.body)
	}

	loop := DefaultConfig() // loopback exempt
	lim = New(NewMemoryStore(), loop, WithClock(newClock().Now))
	srv = server(t, loginEngine(t, lim))
	for i := 0; i < 12; i++ {
		call(t, srv, "POST", "/api/auth/login?email=a@b.example&password=guess", "")
	}
	if r := call(t, srv, "POST", "/api/auth/login?email=a@b.example&password=right", ""); r.code != 200 {
		t.Fatalf("exempt loopback: %d %s", r.code, r.body)
	}
}

// TestIPv6BlockPerPrefix: by default IPv6 clients count per /64. Ten failed
// authentications from ten addresses of one /64 block the whole /64 (a client
// cannot rotate out of the block inside its own network) and no other
// network; with IPv6PrefixBits 128 each address counts on its own.
func TestIPv6BlockPerPrefix(t *testing.T) {
	for _, bits := range []int{DefaultIPv6PrefixBits, 128} {
		t.Run(strconv.Itoa(bits), func(t *testing.T) {
			cfg := testConfig()
			if cfg.IPv6PrefixBits != DefaultIPv6PrefixBits {
				t.Fatalf("DefaultConfig IPv6PrefixBits %d, want %d", cfg.IPv6PrefixBits, DefaultIPv6PrefixBits)
			}
			cfg.IPv6PrefixBits = bits
			lim := New(NewMemoryStore(), cfg, WithClock(newClock().Now))
			srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
			for i := 0; i < 10; i++ {
				ip := fmt.Sprintf("2001:db8:aa:bb:%x::%x", i, i+1)
				if r := call(t, srv, "GET", "/api/protected", ip); r.code != 401 {
					t.Fatalf("failure %d: %d", i, r.code)
				}
			}
			same := call(t, srv, "GET", "/api/protected", "2001:db8:aa:bb:ffff:ffff:ffff:fffe", "Authorization", goodKey)
			other := call(t, srv, "GET", "/api/protected", "2001:db8:aa:bc::1", "Authorization", goodKey)
			if other.code != 200 {
				t.Errorf("another /64: %d", other.code)
			}
			switch {
			case bits == 64 && same.code != 401:
				t.Errorf("a fresh address of the blocked /64 got %d, want 401", same.code)
			case bits == 128 && same.code != 200:
				t.Errorf("per address: a fresh address got %d, want 200", same.code)
			}
			// Request tiers are shared by the /64 too: 5 key-management calls
			// in all, however many addresses they come from.
			got := map[int]int{}
			for i := 0; i < 6; i++ {
				got[call(t, srv, "POST", "/api/developer/keys", fmt.Sprintf("2001:db8:cc:dd::%x", i+1)).code]++
			}
			if want := map[int]int{200: 5, 429: 1}; bits == 64 && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("key tier over one /64: %v, want %v", got, want)
			}
		})
	}
}

// TestAccountTurnAcrossReplicas: an account's sign-in turn is held by one
// limiter at a time among those sharing a store (API replicas sharing
// Redis): the second waits until the first releases it. Another account's
// turn is free meanwhile. Before, the turn was per process only: N replicas
// checked up to N guesses at one account at once, each reading the failure
// count before the others were counted.
func TestAccountTurnAcrossReplicas(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		ctx := context.Background()
		a, b := New(open(), testConfig()), New(open(), testConfig())
		releaseA, err := a.AccountTurn(ctx, "198.51.100.1", "Ann@Example.com ")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			release, err := b.AccountTurn(ctx, "198.51.100.2", "ann@example.com")
			if err == nil {
				release()
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("the second replica took the turn while the first held it (%v)", err)
		case <-time.After(200 * time.Millisecond):
		}
		other, err := b.AccountTurn(ctx, "198.51.100.2", "bob@example.com")
		if err != nil {
			t.Fatalf("another account's turn: %v", err)
		}
		other()
		releaseA()
		releaseA() // twice: harmless
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the second replica never got the turn")
		}
		// Waiting ends with the request.
		hold, _ := a.AccountTurn(ctx, "198.51.100.1", "ann@example.com")
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := b.AccountTurn(short, "198.51.100.2", "ann@example.com"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a turn waited for past its request: %v", err)
		}
		hold()
	})
}

// TestLeaseReleaseIsTheHolders: a lease that outlived its ttl and was taken
// by another holder is not freed by the first holder's late release.
func TestLeaseReleaseIsTheHolders(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		ctx := context.Background()
		ls := open().(Leaser)
		first, ok, err := ls.Lease(ctx, "k", 50*time.Millisecond)
		if err != nil || !ok {
			t.Fatalf("lease %v %v", ok, err)
		}
		if _, ok, _ := ls.Lease(ctx, "k", time.Minute); ok {
			t.Fatal("leased twice")
		}
		time.Sleep(120 * time.Millisecond)
		second, ok, err := ls.Lease(ctx, "k", time.Minute)
		if err != nil || !ok {
			t.Fatalf("lease after the ttl: %v %v", ok, err)
		}
		first()
		if _, ok, _ := ls.Lease(ctx, "k", time.Minute); ok {
			t.Fatal("the first holder's late release freed the second's lease")
		}
		second()
		third, ok, _ := ls.Lease(ctx, "k", time.Minute)
		if !ok {
			t.Fatal("not free after its holder released it")
		}
		third()
	})
}
